"""Starting a Runtime's ranks: here (fork, forkserver, spawn, or the script run again) or by a launcher
(torchrun, SLURM, ``framework launch``), and joining them. The Runtime's ``launch`` and what goes with it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from framework.errors import MisconfigurationError, describe
from framework.runtime.environment import ClusterEnvironment, detect_environment
from framework.seed import restore_rng_states, rng_states
from framework.strategies import Ranks


class LaunchMethods:
    """The Runtime's methods that start its ranks or join them (``launch``, ``run_in_ranks`` ...)."""

    @property
    def needs_launch(self) -> bool:
        """Whether this run wants several processes that nobody has started yet (no torchrun, SLURM ... around)."""
        return self.world_size > 1 and self.environment is None

    def launch(self, function: Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        """Start the processes and run ``function(runtime, *args, **kwargs)`` on each; returns rank 0's result.

        Without ``function``, the rest of the script runs on every rank: this process becomes
        rank 0 and starts the others as new runs of the script (or joins the ranks ``framework
        launch``, torchrun or SLURM started). On one process, ``function`` runs right here.

        Example::

            def train(runtime, epochs):
                model, optimizer = runtime.setup(model, optimizer)
                ...

            Runtime(accelerator="cpu", devices=2, strategy="ddp").launch(train, 3)

        :param function: called as ``function(runtime, *args, **kwargs)`` on every rank; ``None`` (the default):
            the rest of the script runs on every rank instead.
        :raises MisconfigurationError: where ``function`` is ``None`` and the ranks are to be started here, by a
            strategy whose start method is neither "auto" nor "popen" or on several nodes.
        :raises TypeError: where ``function`` is given but not callable.
        """
        if function is None:
            if self.needs_launch:
                requested = getattr(self.strategy, "start_method", "auto")
                if requested not in ("auto", "popen") or self.num_nodes > 1:
                    raise MisconfigurationError(
                        f"runtime.launch() without a function cannot start ranks with strategy={self.strategy.name!r} "
                        f"({requested}) or on several nodes. Call runtime.launch(train) with the "
                        "training in a function, or start the script with `framework launch` (or torchrun)."
                    )
                self.become_rank_zero()
            self.setup_environment()
            return None
        return self.run_in_ranks(function, *args, **kwargs)[0]

    def start_method(self) -> str | None:
        """How this run's ranks start: None where they need no starting (one process, or a launcher started
        them); else ``"fork"``, ``"forkserver"``, ``"spawn"`` or ``"popen"`` (the script run again), by the rule in
        ``framework.runtime.start_method``."""
        if not self.needs_launch:
            return None
        from framework.runtime.relaunch import script_command
        from framework.runtime.start_method import choose_start_method

        return choose_start_method(getattr(self.strategy, "start_method", "auto"), script_command() is not None)

    def run_in_ranks(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """``function(runtime, *args, **kwargs)`` on every rank; the results of the ranks this process waited for.

        Where ranks are forked or spawned, this process waits for all of them and gets every
        rank's result; where the script is run again (``"popen"``), this process is rank 0 and
        gets its own.

        :param function: called as ``function(runtime, *args, **kwargs)`` on every rank.
        :raises TypeError: where ``function`` is not callable.
        """
        if not callable(function):
            raise TypeError(f"launch(function={describe(function)}): the function must be callable.")
        method = self.start_method()
        if method == "fork":
            # torch imports torch._dynamo (~2 s) when DDP wraps a model and in the first optimizer's constructor;
            # imported once here, forked ranks inherit it instead of each paying for it, at every launch
            import torch._dynamo  # noqa: F401
        if method in ("fork", "forkserver", "spawn"):
            from framework.runtime.rank_restarts import start_with_restarts

            return start_with_restarts(_run_as_rank, (self, rng_states(), function, args, kwargs), self.world_size,
                                       method, self._rank_environment(), getattr(self.strategy, "max_restarts", 0))
        if method == "popen":
            self.become_rank_zero()
        self.setup_environment()
        return [function(self, *args, **kwargs)]

    def become_rank_zero(self) -> None:
        """Start ranks 1 .. N-1 as new runs of this script and join them as rank 0 (everything after runs on every
        rank)."""
        from framework.runtime.rank_restarts import become_launcher
        from framework.runtime.relaunch import relaunch_script

        become_launcher(self.world_size, getattr(self.strategy, "max_restarts", 0))  # returns only without restarts
        relaunch_script(self.world_size)
        self._join_launched()

    def _rank_environment(self) -> dict[str, str]:
        """What forked or spawned ranks get in their environment: a CPU run's ranks see no CUDA device, so neither
        torch (Adam's step, ``pin_memory``, torch.compile) nor user code initialise CUDA in them. Not for ranks
        that run the script again: rank 0, this process, sees the devices, and the ranks must agree (torch's
        DeviceMesh makes one more process group where CUDA is available)."""
        return {"CUDA_VISIBLE_DEVICES": ""} if self.accelerator == "cpu" else {}

    def _join_launched(self) -> None:
        """In a process the launcher started: take up this rank's device and share the machine's cores."""
        self.environment = detect_environment()
        ranks = attached_ranks(self.environment)
        self._connect(ranks)
        share_cores(ranks.local_world_size)


def attached_ranks(environment: ClusterEnvironment) -> Ranks:
    """The ranks a launcher set up, with rank 0's address exported where torch's process group reads it
    (torchrun sets MASTER_ADDR/MASTER_PORT, SLURM does not)."""
    os.environ.setdefault("MASTER_ADDR", environment.main_address)
    os.environ.setdefault("MASTER_PORT", str(environment.main_port))
    from framework.runtime.peer_failure import share_failures_with_peers  # only under a launcher: not at import

    share_failures_with_peers()
    return Ranks(world_size=environment.world_size, global_rank=environment.global_rank,
                  local_rank=environment.local_rank, node_rank=environment.node_rank,
                  local_world_size=environment.local_world_size)


def share_cores(local_world_size: int) -> None:
    """Each of a node's processes takes its share of the CPU cores, unless OMP_NUM_THREADS already decided."""
    if local_world_size < 2 or "OMP_NUM_THREADS" in os.environ:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(max(1, cores // local_world_size))


def _run_as_rank(runtime: Any, rng: dict[str, Any], function: Callable[..., Any], args: tuple,
                 kwargs: dict[str, Any]) -> Any:
    """What each started process runs: join the ranks, draw random numbers as the caller would, run, end."""
    runtime._join_launched()
    restore_rng_states(rng)
    runtime.setup_environment()
    try:
        result = function(runtime, *args, **kwargs)
    except BaseException:
        runtime._finalize_loggers("failed")
        raise
    runtime._finalize_loggers("success")  # a started rank ends without running atexit handlers
    runtime.strategy.end_process_group()
    return result
