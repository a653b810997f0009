"""Accelerate launch settings as a torchrun launch: the torchrun options that start the ranks, and the
environment variables that carry the settings to each rank's ``Accelerator()``.

The variables are the ones ``accelerate launch`` (1.15) sets, spelled as it spells them, so a script sees the
same environment under either launcher:

- always: ``ACCELERATE_USE_CPU`` (``True``/``False``), ``ACCELERATE_MIXED_PRECISION`` (``no``/``fp16``/
  ``bf16``), ``ACCELERATE_DYNAMO_BACKEND`` (``NO``, ``INDUCTOR`` ...), ``ACCELERATE_DYNAMO_MODE``,
  ``ACCELERATE_DYNAMO_USE_FULLGRAPH``/``_USE_DYNAMIC``/``_USE_REGIONAL_COMPILATION`` (``True``/``False``);
- when given: ``ACCELERATE_GRADIENT_ACCUMULATION_STEPS``, ``CUDA_VISIBLE_DEVICES`` (``gpu_ids`` on GPUs),
  ``OMP_NUM_THREADS`` (``--num_cpu_threads_per_process``);
- with FSDP: ``ACCELERATE_USE_FSDP=true`` and the ``FSDP_*`` variable of every ``fsdp_*`` key, Accelerate's
  default where the settings give none (booleans ``true``/``false``);
- with DeepSpeed: ``ACCELERATE_USE_DEEPSPEED=true`` and the ``ACCELERATE_DEEPSPEED_*`` (and
  ``ACCELERATE_GRADIENT_CLIPPING``) variable of each key of ``deepspeed_config`` given; the config file's path
  made absolute, so that ranks started elsewhere find it.

Each key's variable and default are in :mod:`framework.accelerate.config_keys`, through which the ranks'
``Accelerator()`` reads them back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from framework.accelerate.config_keys import (
    DEEPSPEED_KEYS,
    DYNAMO_KEYS,
    FSDP_KEYS,
    GPU_TYPES,
    KEYS,
    USE_DEEPSPEED,
    USE_FSDP,
)
from framework.cli.accelerate_config import Settings, check_fsdp
from framework.cli.errors import ConfigError

DEFAULT_PORT = 29500  # Accelerate's main_process_port when a rendezvous address is given without one


@dataclass
class LaunchPlan:
    """What ``framework launch`` runs: torchrun's options before the script, the variables every rank gets,
    and a note said once before the ranks start (a GPU config run on CPU ranks)."""

    torchrun_options: list[str]
    environment: dict[str, str]
    notes: list[str] = field(default_factory=list)


def launch_plan(settings: Settings, gpus: int) -> LaunchPlan:
    """The launch of ``settings`` on a machine with ``gpus`` CUDA devices.

    Ranks run on the CPU (gloo) when the settings ask for it (``use_cpu``, ``--cpu``, ``MULTI_CPU``) or when
    the machine has no GPU, also for a MULTI_GPU or FSDP config, which Accelerate refuses there.

    Example::

        plan = launch_plan(read_config("fsdp.yaml"), gpus=0)
        plan.torchrun_options  # ['--standalone', '--nproc-per-node', '2']
        plan.environment["FSDP_VERSION"]  # '2'
    """
    distributed = settings.get("distributed_type")
    cpu_asked = settings.get("use_cpu", False) or distributed == "MULTI_CPU"
    on_cpu = cpu_asked or gpus == 0
    processes = _process_count(settings, distributed, on_cpu, gpus)
    machines = settings.get("num_machines", 1)
    if processes % machines:
        raise settings.error("num_processes", f"{processes} processes do not divide among num_machines "
                                              f"{machines}; give a multiple of {machines}.")
    per_machine = processes // machines
    if not on_cpu and per_machine > gpus:
        raise settings.error("num_processes", f"{processes} processes on {machines} machine(s) are {per_machine} "
                                              f"per machine, but torch finds {gpus} GPU(s) here; give at most "
                                              f"{gpus * machines}, or --cpu for CPU ranks.")
    options = [*_rendezvous(settings, machines), "--nproc-per-node", str(per_machine)]
    environment = accelerate_environment(settings, on_cpu)
    if not on_cpu and settings.get("gpu_ids", "all") != "all":
        environment[KEYS["gpu_ids"].variable] = _visible_gpus(settings, per_machine)
    notes = []
    if distributed in GPU_TYPES and not cpu_asked and gpus == 0:
        source = _source(settings.places["distributed_type"])
        notes.append(f"{source} asks for GPUs (distributed_type {distributed}), but torch finds none on this "
                     f"machine (torch.cuda.is_available() is False): starting {per_machine} CPU "
                     f"rank{'s' if per_machine > 1 else ''} with gloo instead.")
    return LaunchPlan(options, environment, notes)


def accelerate_environment(settings: Settings, on_cpu: bool) -> dict[str, str]:
    """The variables that carry ``settings`` to the ranks' ``Accelerator()`` (see the module's docstring)."""
    environment = {KEYS["use_cpu"].variable: str(on_cpu)}
    for name in ("mixed_precision", "gradient_accumulation_steps", *DYNAMO_KEYS):
        value = settings.get(name, KEYS[name].default if KEYS[name].sent else None)
        if value is not None:
            environment[KEYS[name].variable] = str(value)  # Accelerate writes these booleans as True/False
    if settings.get("distributed_type") == "FSDP":
        check_fsdp(settings)
        environment[USE_FSDP] = "true"
        environment.update(_fsdp_environment(settings))
    if settings.get("distributed_type") == "DEEPSPEED":
        environment[USE_DEEPSPEED] = "true"
        environment.update(_deepspeed_environment(settings))
    if settings.get("num_cpu_threads_per_process") is not None:
        environment[KEYS["num_cpu_threads_per_process"].variable] = str(settings.get("num_cpu_threads_per_process"))
    return environment


def _fsdp_environment(settings: Settings) -> dict[str, str]:
    environment = {}
    for name in FSDP_KEYS:
        key = KEYS[name]
        value = settings.get(name, key.default if key.sent else None)
        if value is not None:
            environment[key.variable] = str(value).lower() if isinstance(value, bool) else str(value)
    resharding = settings.get("fsdp_reshard_after_forward")
    if isinstance(resharding, str):
        # `accelerate config` writes version 1's strategy under this key, and Accelerate sends it lower-cased;
        # the strategy is also sent as FSDP_SHARDING_STRATEGY, which Accelerate 1.15 reads (its own launcher
        # sends its default FULL_SHARD there, losing the file's choice).
        environment[KEYS["fsdp_reshard_after_forward"].variable] = resharding.lower()
        if settings.get("fsdp_sharding_strategy") is None:
            environment[KEYS["fsdp_sharding_strategy"].variable] = resharding
    return environment


def _deepspeed_environment(settings: Settings) -> dict[str, str]:
    environment = {}
    for name in DEEPSPEED_KEYS:
        key, value = KEYS[name], settings.get(name)
        if value is not None and key.variable is not None:
            environment[key.variable] = str(value).lower() if isinstance(value, bool) else str(value)
    config_file = settings.get("deepspeed_config_file")
    if config_file is not None:
        if not os.path.isfile(config_file):
            raise settings.error("deepspeed_config_file", f"{config_file!r}: there is no such DeepSpeed config file "
                                                          f"(looked in {os.getcwd()}).")
        environment[KEYS["deepspeed_config_file"].variable] = os.path.abspath(config_file)
    return environment


def _source(place: str) -> str:
    """``--config_file a.yaml`` of ``--config_file a.yaml:3: distributed_type``; a flag (``--use_fsdp``) as it is."""
    return place.rsplit(": ", 1)[0].rsplit(":", 1)[0] if place.startswith("--config_file ") else place


def _process_count(settings: Settings, distributed: str | None, on_cpu: bool, gpus: int) -> int:
    """num_processes, or where it is not given (or -1): one per GPU on GPUs, else one for a single-process run."""
    count = settings.get("num_processes", -1)
    if count != -1:
        return count
    if not on_cpu and distributed in (None, *GPU_TYPES):
        return gpus
    if distributed in (None, "NO"):
        return 1
    source = settings.places.get("distributed_type", "distributed_type")
    raise ConfigError(f"{source}: {distributed} needs a number of processes and none is given (no num_processes, "
                      f"or -1), nor GPUs here to count; give --num_processes N.")


def _rendezvous(settings: Settings, machines: int) -> list[str]:
    """torchrun's rendezvous options: where machine 0 listens, or --standalone (a free port) on one machine."""
    address, port = settings.get("main_process_ip"), settings.get("main_process_port")
    rank = settings.get("machine_rank", 0)
    if rank >= machines:
        raise settings.error("machine_rank", f"{rank} is not below num_machines {machines}; accepted: 0 to "
                                             f"{machines - 1}.")
    if machines == 1:
        if port == 0 or (port is None and address is None):
            return ["--standalone"]
        return ["--master-addr", address or "127.0.0.1", "--master-port", str(port or DEFAULT_PORT)]
    if address is None:
        raise settings.error("num_machines", f"{machines} machines need main_process_ip, the address of "
                                             f"machine 0 (--main_process_ip or the config's main_process_ip).")
    if port == 0:
        raise settings.error("main_process_port", "0 (any free port) works on one machine only; give the port "
                                                  "machine 0 listens on.")
    return ["--nnodes", str(machines), "--node-rank", str(rank), "--master-addr", address,
            "--master-port", str(port or DEFAULT_PORT)]


def _visible_gpus(settings: Settings, per_machine: int) -> str:
    ids = settings.get("gpu_ids")
    if len(ids.split(",")) < per_machine:
        raise settings.error("gpu_ids", f"{ids!r} names {len(ids.split(','))} GPU(s) for {per_machine} processes "
                                        f"on this machine; name one GPU per process, or all.")
    return ids

