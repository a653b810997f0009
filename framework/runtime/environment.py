"""Which rank this process is, when a launcher started it: torchrun (and ``framework launch``), SLURM, or ours."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from framework.errors import MisconfigurationError
from framework.plugins import environments as plugins
from framework.plugins.environments import first_host, slurm_port

# Set in the ranks that run the script again (rank 0 included), to tell them from ranks torchrun started.
SCRIPT_RANKS_VARIABLE = "FRAMEWORK_SCRIPT_RANKS"


@dataclass(frozen=True)
class ClusterEnvironment:
    """Where this process stands among the ranks of one run, and how the ranks find each other.

    ``source`` says who set the ranks up: ``"torchrun"`` (also ``framework launch`` and the
    framework's forked or spawned ranks, which speak torchrun's variables), ``"script"`` (ranks that
    run the script again, started by rank 0: ``start_method="auto"`` where forking is unsafe, or
    ``runtime.launch()``) or ``"slurm"``.
    """

    world_size: int
    global_rank: int
    local_rank: int
    node_rank: int
    local_world_size: int
    main_address: str
    main_port: int
    source: str


def detect_environment(environ: Mapping[str, str] | None = None) -> ClusterEnvironment | None:
    """The environment a launcher left in ``environ`` (default ``os.environ``), or None when none started us."""
    environ = os.environ if environ is None else environ
    if _has(environ, "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        return _torchrun(environ)
    if _has(environ, "SLURM_NTASKS", "SLURM_PROCID") and not _interactive_slurm(environ):
        return _slurm(environ)
    return None


def environment_for(plugin: plugins.ClusterEnvironment | None, num_nodes: int,
                    environ: Mapping[str, str] | None = None) -> ClusterEnvironment | None:
    """The environment as ``plugins=[...]`` says it is (``framework.plugins.environments``), or as detected
    without one; None when framework is to start the ranks itself."""
    environ = os.environ if environ is None else environ
    if plugin is None:
        return detect_environment(environ)
    plugin.validate_settings(0, num_nodes)
    if isinstance(plugin, plugins.SLURMEnvironment):
        return _slurm(environ)
    if isinstance(plugin, (plugins.TorchElasticEnvironment, plugins.LightningEnvironment)):
        started = _has(environ, "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
        return _torchrun(environ) if started else None
    if not plugin.creates_processes_externally:
        return None
    world_size = plugin.world_size()
    local_world_size = _int(environ, "LOCAL_WORLD_SIZE", max(1, world_size // num_nodes))
    return ClusterEnvironment(
        world_size=world_size, global_rank=plugin.global_rank(), local_rank=plugin.local_rank(),
        node_rank=plugin.node_rank(), local_world_size=local_world_size,
        main_address=plugin.main_address, main_port=plugin.main_port, source=type(plugin).__name__,
    )


def check_matches_launcher(environment: ClusterEnvironment, devices: Any, devices_per_node: int,
                           num_nodes: int) -> None:
    """Raise ``MisconfigurationError`` unless the launcher started ``devices_per_node`` processes on each of
    ``num_nodes`` nodes: ``Trainer(devices=2, num_nodes=2)`` runs on 2 nodes x 2 processes, nothing else.

    ``devices``: the argument as given, named in the message.
    """
    world_size = devices_per_node * num_nodes
    if world_size == environment.world_size and devices_per_node == environment.local_world_size:
        return
    asked = f"devices={devices!r} and num_nodes={num_nodes} make {world_size}"
    if environment.source == "script":
        raise MisconfigurationError(
            f"This process is one of {environment.world_size} ranks that an earlier fit (or launch) in this "
            f"script started by running it again, but {asked}. Every Trainer or Runtime after it in the script "
            "runs on those ranks: give them the same devices and num_nodes, or start the script with "
            "`framework launch` to choose the number of processes yourself."
        )
    started = (f"{environment.world_size} processes (WORLD_SIZE), {environment.local_world_size} on this node "
               "(LOCAL_WORLD_SIZE)")
    raise MisconfigurationError(
        f"The launcher ({environment.source}) started {started}, but {asked}, {devices_per_node} on each node. "
        "Start devices processes on each of num_nodes nodes (e.g. `framework launch --nproc-per-node <devices> "
        "--nnodes <num_nodes>`), or make the Trainer/Runtime arguments match."
    )


def _has(environ: Mapping[str, str], *names: str) -> bool:
    return all(name in environ for name in names)


def _torchrun(environ: Mapping[str, str]) -> ClusterEnvironment:
    world_size = _int(environ, "WORLD_SIZE")
    local_world_size = _int(environ, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in environ else world_size
    node_rank = _int(environ, "GROUP_RANK") if "GROUP_RANK" in environ else _int(environ, "NODE_RANK", 0)
    return ClusterEnvironment(
        world_size=world_size, global_rank=_int(environ, "RANK"), local_rank=_int(environ, "LOCAL_RANK"),
        node_rank=node_rank, local_world_size=local_world_size, main_address=environ["MASTER_ADDR"],
        main_port=_int(environ, "MASTER_PORT"), source="script" if SCRIPT_RANKS_VARIABLE in environ else "torchrun",
    )


def _interactive_slurm(environ: Mapping[str, str]) -> bool:
    """``srun --pty bash`` and ``salloc`` give a shell, not ranks: the user launches from inside it.

    In such a job (named ``bash`` or ``interactive``, salloc's name) the tasks of a step that ``srun -n 2 python
    train.py`` started in the shell are ranks all the same: they have a step (``SLURM_STEP_ID``) and no terminal of
    their own (``SLURM_PTY_PORT``, which ``srun --pty`` sets and nested steps inherit)."""
    if int(environ.get("SLURM_NTASKS", "1")) < 2:
        return True
    if environ.get("SLURM_JOB_NAME") not in ("bash", "interactive"):
        return False
    return "SLURM_STEP_ID" not in environ or "SLURM_PTY_PORT" in environ


def _slurm(environ: Mapping[str, str]) -> ClusterEnvironment:
    world_size = _int(environ, "SLURM_NTASKS")
    nodes = _int(environ, "SLURM_NNODES", 1)
    address = environ.get("MASTER_ADDR") or first_host(environ.get("SLURM_NODELIST", "127.0.0.1"))
    port = _int(environ, "MASTER_PORT") if "MASTER_PORT" in environ else slurm_port(environ)
    return ClusterEnvironment(
        world_size=world_size, global_rank=_int(environ, "SLURM_PROCID"), local_rank=_int(environ, "SLURM_LOCALID", 0),
        node_rank=_int(environ, "SLURM_NODEID", 0), local_world_size=max(1, world_size // nodes),
        main_address=address, main_port=port, source="slurm",
    )


def _int(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = environ.get(name)
    if value is None and default is not None:
        return default
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise MisconfigurationError(f"The environment variable {name}={value!r} should be an integer.") from None
