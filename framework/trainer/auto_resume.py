"""Which checkpoint a ``fit`` without ``ckpt_path`` resumes from by itself, and when a preemption checkpoint is done
with. A ``ckpt_path`` the user passes always wins; ``Trainer(auto_resume=False)`` turns all of this off.

Which checkpoint, and when:

- **A restart of this job** (``framework launch --max-restarts`` or torchrun after a lost rank:
  ``TORCHELASTIC_RESTART_COUNT`` > 0; the Trainer's own ranks started again: ``DDPStrategy(max_restarts=...)``; a
  SLURM requeue: ``SLURM_RESTART_COUNT`` > 0) resumes from the newest complete checkpoint of this job: its
  ModelCheckpoint files and the preemption checkpoints. Each checkpoint records the job that wrote it (the SLURM
  job, else the launch: ``runtime.preemption_signals.job_identity``), so a file an earlier, finished job left in
  the same folder is never taken.
- **Any other start** (a plain re-run of the script, a job submitted again by hand) resumes from the newest
  preemption checkpoint, ``hpc_ckpt_<n>.ckpt`` in ``default_root_dir``, if there is one: a run stopped by a
  preemption signal wrote it to be continued, and no run has gone on from it yet.
- Otherwise the fit starts afresh.

A checkpoint whose save was cut short is never taken; one passed over for that is named in a warning, beside the
one taken instead. The log says which file was resumed and why it was chosen.

A preemption checkpoint is done with once a fit has gone on past it: when the fit has saved its first checkpoint
(the save complete, in the background too), or when it ends. Rank 0 then removes the preemption checkpoints that
were there when the fit started (every rank has loaded what it resumed from by then: a save has every rank wait
for it, and the end of fit waits for every rank first), so no later run goes back to that old state. A fit stopped
by an error before its first save leaves them for the next start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from framework import console
from framework.io.async_writer import writes_framework_files
from framework.io.checkpoint_io import CheckpointIO, load_through
from framework.io.checkpoint_storage import choose_checkpoint, peek_checkpoint
from framework.io.fs import names_in
from framework.io.save_points import collecting_writer
from framework.runtime.preemption_signals import (
    MAX_RESTARTS_VARIABLE,
    RESTART_REASON_VARIABLE,
    job_identity,
    restart_count,
)
from framework.trainer.preemption import hpc_checkpoints, in_directory
from framework.trainer.state import TrainerStatus

if TYPE_CHECKING:
    from framework.trainer.run import Run


@dataclass(frozen=True)
class Resume:
    """The checkpoint a fit resumes from by itself, and why it was chosen (said in the log)."""

    path: str
    why: str


def automatic_resume(run: Run) -> Resume | None:
    """The checkpoint a ``fit(ckpt_path=None)`` resumes from (see the module's docstring), or None to start afresh.
    Rank 0 decides; the others are told."""
    preempted = hpc_checkpoints(run.settings.default_root_dir)
    restarts = restart_count()
    own = _model_checkpoint_files(run) if restarts else []
    job, others = job_identity(), []
    checkpoint_io = run.runtime.strategy.checkpoint_io
    choice = choose_checkpoint(preempted + own, checkpoint_io.is_complete)
    while choice.path in own and job and _job_of(checkpoint_io, choice.path) != job:  # an earlier job's file
        own.remove(choice.path)
        others.append(choice.path)
        choice = choose_checkpoint(preempted + own, checkpoint_io.is_complete)
    if choice.broken:
        instead = f"resuming from {choice.path} instead" if choice.path else "no complete one is left to resume from"
        console.warn_user(f"Passed over {_listed(choice.broken)}: incomplete or damaged (a save cut short, or a "
                          f"copy cut off); {instead}.")
    if choice.path is None:
        return None
    if not restarts:
        why = "a run stopped by a preemption signal left it, and no run has gone on from it yet"
    else:
        most = os.environ.get(MAX_RESTARTS_VARIABLE, "")
        reason = os.environ.get(RESTART_REASON_VARIABLE, "")
        why = (f"restart {restarts}{' of ' + most if most else ''} of this job{': ' + reason if reason else ''}; "
               "the newest complete checkpoint this job wrote"
               + (f" (passed over {_listed(others)}, written by another job)" if others else ""))
    return Resume(choice.path, why)


def announce_resume(run: Run, resume: Resume, checkpoint: dict[str, Any]) -> None:
    """Say, on rank 0, in the console and to each logger (``Logger.log_restart``), that the run resumes by itself
    from ``resume.path``, and why."""
    if not run.is_global_zero:
        return
    restarts, most = restart_count(), os.environ.get(MAX_RESTARTS_VARIABLE, "")
    record = {"restart": restarts, "max_restarts": int(most) if most.isdigit() else None,
              "reason": os.environ.get(RESTART_REASON_VARIABLE, "") if restarts else "preempted",
              "checkpoint": resume.path, "global_step": int(checkpoint.get("global_step", 0))}
    console.info(f"Resuming from {resume.path} at global step {record['global_step']}: {resume.why}. Pass "
                 "fit(ckpt_path=...) to choose another checkpoint, or Trainer(auto_resume=False) to start afresh.")
    for logger in run.loggers:
        log_restart = getattr(logger, "log_restart", None)
        if callable(log_restart):
            log_restart(record)


# -- preemption checkpoints done with ---
def note_preemption_checkpoints(run: Run) -> None:
    """At the start of fit (rank 0): the preemption checkpoints there now are done with once this fit has gone
    on past them (``consume_preemption_checkpoints``)."""
    run.context.preemption_checkpoints = (
        hpc_checkpoints(run.settings.default_root_dir) if run.is_global_zero and run.settings.auto_resume else [])


def consume_preemption_checkpoints(run: Run) -> None:
    """This fit has gone on past the preemption checkpoints it started with: remove them (rank 0), once the save
    being made is complete (after its background write, inside a save point), or now."""
    if run.state.status != TrainerStatus.RUNNING:  # a save after a fit that failed: it did not go on
        return
    paths, run.context.preemption_checkpoints = run.context.preemption_checkpoints, []
    if not paths:
        return

    def remove_all() -> None:
        for path in paths:
            run.runtime.strategy.checkpoint_io.remove_checkpoint(path)

    writer = collecting_writer()
    if writer is not None:
        writer.then(remove_all, f"removing the preemption checkpoint(s) {_listed(paths)}")
    else:
        remove_all()


def consume_at_fit_end(run: Run) -> None:
    """A fit ended: once every rank is here, the preemption checkpoints it started with are removed."""
    run.runtime.barrier("preemption checkpoints done with")
    consume_preemption_checkpoints(run)


def _model_checkpoint_files(run: Run) -> list[str]:
    found: list[str] = []
    for callback in run.checkpoint_callbacks:
        if getattr(callback, "save_weights_only", False):  # its files cannot resume a fit
            continue
        directory = getattr(callback, "dirpath", None)
        extension = getattr(callback, "FILE_EXTENSION", ".ckpt")
        if directory:
            found += [in_directory(directory, name) for name in names_in(directory) if name.endswith(extension)]
        last: Any = getattr(callback, "last_model_path", "")
        if last:
            found.append(str(last))
    return list(dict.fromkeys(found))


def _job_of(checkpoint_io: CheckpointIO, path: str) -> str:
    """The job that wrote ``path``: peeked at in framework's files, read through the plugin that wrote any other."""
    if writes_framework_files(checkpoint_io):
        checkpoint = peek_checkpoint(path)
    else:
        try:
            checkpoint = load_through(checkpoint_io, path, weights_only=None)
        except Exception:  # noqa: BLE001 - a file its plugin cannot read was not written by this job
            checkpoint = {}
    return str(checkpoint.get("loops", {}).get("fit", {}).get("job_id", ""))


def _listed(paths: Any) -> str:
    return ", ".join(str(path) for path in paths)
