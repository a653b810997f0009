"""Which checkpoint a ``fit`` without ``ckpt_path`` resumes from by itself: the job was started again after a lost
rank or a preemption, so the same command goes on where the last complete checkpoint left it.

- A preemption checkpoint (``hpc_ckpt_<n>.ckpt`` in ``default_root_dir``, written when a signal stopped the run)
  is resumed from whenever one exists: it means the run was stopped to be started again. Once a fit that went on
  from an interruption ends, the preemption checkpoints are removed, so a later run of the script starts afresh.
- On a restart (``framework launch --max-restarts``/torchrun's ``TORCHELASTIC_RESTART_COUNT``, or SLURM's
  ``SLURM_RESTART_COUNT`` after a requeue), the checkpoints of the run's ModelCheckpoint callbacks count too.

The newest complete one of these wins; an incomplete one (a save cut short) never does. A ``ckpt_path`` the user
passes always wins over this; ``"hpc"`` names the newest preemption checkpoint, as in Lightning.
``Trainer(auto_resume=False)`` turns all of this off.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from framework import console
from framework.io.checkpoint import newest_complete_checkpoint
from framework.io.fs import names_in, remove
from framework.runtime.preemption import MAX_RESTARTS_VARIABLE, RESTART_REASON_VARIABLE, restart_count
from framework.trainer.preemption import hpc_checkpoints, in_directory

if TYPE_CHECKING:
    from framework.trainer.trainer import Trainer


def automatic_ckpt_path(trainer: Trainer) -> str | None:
    """The checkpoint a ``fit(ckpt_path=None)`` resumes from (see the module's docstring), or None to start afresh."""
    candidates = hpc_checkpoints(trainer.default_root_dir)
    if restart_count():
        candidates += _model_checkpoint_files(trainer)
    return newest_complete_checkpoint(candidates)


def announce_resume(trainer: Trainer, path: str, checkpoint: dict[str, Any]) -> None:
    """Say, on rank 0, in the console and to each logger (``Logger.log_restart``), that the run resumes by itself
    from ``path``: which restart this is and why the last attempt ended."""
    if not trainer.is_global_zero:
        return
    restarts, most = restart_count(), os.environ.get(MAX_RESTARTS_VARIABLE, "")
    record = {"restart": restarts, "max_restarts": int(most) if most.isdigit() else None,
              "reason": os.environ.get(RESTART_REASON_VARIABLE, "") if restarts else "preempted",
              "checkpoint": path, "global_step": int(checkpoint.get("global_step", 0))}
    which = f"restart {restarts}{' of ' + most if most else ''} of this job" if restarts else \
        "a preemption checkpoint was left by the last run"
    reason = f": {record['reason']}" if restarts and record["reason"] else ""
    console.info(f"Resuming from {path} at global step {record['global_step']} ({which}{reason}). Pass "
                 "fit(ckpt_path=...) to choose another checkpoint.")
    for logger in trainer.loggers:
        log_restart = getattr(logger, "log_restart", None)
        if callable(log_restart):
            log_restart(record)


def forget_preemption_checkpoints(trainer: Trainer) -> None:
    """After a fit that went on from an interruption (it resumed by itself, or this is a restart) has ended: remove
    the preemption checkpoints in ``default_root_dir``, so a later run of the script starts afresh instead of
    resuming an old one. (A restart may have resumed from a newer ModelCheckpoint file than the preemption one.)"""
    if not trainer.is_global_zero or not trainer.auto_resume:
        return
    if restart_count() or trainer.ckpt_path in hpc_checkpoints(trainer.default_root_dir):
        for path in hpc_checkpoints(trainer.default_root_dir):
            remove(path)


def _model_checkpoint_files(trainer: Trainer) -> list[str]:
    found: list[str] = []
    for callback in trainer.checkpoint_callbacks:
        directory = getattr(callback, "dirpath", None)
        extension = getattr(callback, "FILE_EXTENSION", ".ckpt")
        if directory:
            found += [in_directory(directory, name) for name in names_in(directory) if name.endswith(extension)]
        last: Any = getattr(callback, "last_model_path", "")
        if last:
            found.append(str(last))
    return found


