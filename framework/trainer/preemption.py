"""What the fit loop does on a preemption signal: at the step boundary every rank agreed on, save the run and leave
with the exit status that asks for a new start (:mod:`framework.runtime.preemption_signals`).

Under SLURM, rank 0 then requeues the job (``requeue_when_done``), last of all: ``scontrol requeue`` kills every
process of the job within milliseconds. ``plugins=[SLURMEnvironment(auto_requeue=False)]`` leaves the requeue out.

The checkpoint is Lightning's "hpc" checkpoint: ``hpc_ckpt_<n>.ckpt`` in ``default_root_dir``, written by
``trainer.save_checkpoint`` (a file, or a directory for a sharded strategy). The next start of the job finds it
(:mod:`framework.trainer.auto_resume`); the older ones are removed once the new one is whole.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from framework import console
from framework.io.fs import names_in
from framework.runtime.preemption_signals import Preempted, PreemptionWatch, slurm_requeue

if TYPE_CHECKING:
    from framework.trainer.run import Run

HPC_PREFIX = "hpc_ckpt_"
_HPC_NAME = re.compile(rf"^{HPC_PREFIX}(\d+)\.ckpt$")


def hpc_checkpoints(directory: str) -> list[str]:
    """The ``hpc_ckpt_<n>.ckpt`` paths in ``directory``, oldest (lowest n) first."""
    numbered = [(int(match.group(1)), name) for name in names_in(directory) if (match := _HPC_NAME.match(name))]
    return [in_directory(directory, name) for _, name in sorted(numbered)]


class PreemptionStop:
    """The fit loop's side of preemption: the signal watch for the length of a fit, and the save-and-leave."""

    def __init__(self, run: Run, save: Callable[[str], None]) -> None:
        self.run = run
        self.save = save  # writes the run's checkpoint to a path, as trainer.save_checkpoint does
        self.watch = PreemptionWatch()

    @property
    def wished(self) -> bool:
        """This process received a preemption signal."""
        return self.watch.received is not None

    def save_and_leave(self) -> None:
        """Save the run as it is now (every rank, at the same step), requeue a SLURM job, and raise ``Preempted``."""
        run = self.run
        self.watch.answering = True
        path = run.runtime.broadcast(self._next_path() if run.is_global_zero else None)
        self.save(path)
        run.runtime.barrier("preemption checkpoint saved")
        if run.is_global_zero:
            for older in hpc_checkpoints(run.settings.default_root_dir)[:-1]:
                if older != path:
                    run.runtime.strategy.checkpoint_io.remove_checkpoint(older)
            console.info(f"{self._signal_name()} at global step {run.state.global_step}: saved {path}.")
        raise Preempted(self._signal_name(), path)

    def _signal_name(self) -> str:
        return f"{self.watch.signal_name} received" if self.wished else "A preemption signal received by another rank"

    def _next_path(self) -> str:
        directory = self.run.settings.default_root_dir
        existing = hpc_checkpoints(directory)
        number = int(_HPC_NAME.match(os.path.basename(existing[-1])).group(1)) + 1 if existing else 1
        return in_directory(directory, f"{HPC_PREFIX}{number}.ckpt")


def in_directory(directory: str, name: str) -> str:
    """``name`` in ``directory``, a local path or an fsspec URL."""
    return f"{directory.rstrip('/')}/{name}" if "://" in directory else os.path.join(directory, name)


def requeue_when_done(run: Run) -> None:
    """The last thing a preempted run does (after ``on_exception`` and the loggers' last writes): once every rank
    is here, rank 0 asks SLURM to requeue the job, which kills every process of the job at once."""
    run.runtime.barrier("preempted run done")
    if run.is_global_zero and getattr(run.runtime.cluster_environment, "auto_requeue", True):
        slurm_requeue(say=console.info)
