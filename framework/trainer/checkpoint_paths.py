"""Which checkpoint a ``ckpt_path`` names (``"last"``, ``"best"``, ``"hpc"`` or a path), and loading it for a
run: ``load_for`` resolves the name, has the strategy read the file (``framework.io`` reads it safely) and turns a
Lightning checkpoint into ours. What a fit without ``ckpt_path`` resumes by itself is in ``auto_resume``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from framework import console
from framework.callbacks.model_checkpoint import ModelCheckpoint
from framework.errors import CheckpointError, MisconfigurationError, describe
from framework.io.checkpoint_storage import (
    SET_ASIDE_SUFFIX,
    check_trainer_checkpoint,
    choose_checkpoint,
    complete_checkpoint_at,
    complete_checkpoints_in,
)
from framework.io.fs import exists
from framework.trainer.checkpoint_contents import restore_checkpoint
from framework.trainer.lightning_checkpoint import from_lightning, is_lightning_checkpoint
from framework.trainer.preemption import hpc_checkpoints
from framework.trainer.state import TrainerFn

if TYPE_CHECKING:
    from framework.trainer.run import Run


def evaluation_ckpt_path(run: Run, fn: Any, ckpt_path: Any) -> Any:
    """validate/test/predict's ``ckpt_path`` with "best" made the file's path, before the run starts.

    Without a model or a path, the best checkpoint of the last fit, as in Lightning. Resolved
    before the run's ``configure_callbacks`` may replace the ModelCheckpoint that knows it.
    """
    if ckpt_path is None and not run.model_given:
        best = getattr(next(iter(run.checkpoint_callbacks), None), "best_model_path", None)
        if best:
            console.warn_user(
                f"trainer.{fn.value}() was called without a model, so the best checkpoint of the last fit is "
                f"loaded ({best}), as Lightning does. Pass ckpt_path='best' to say so and silence this, or "
                "ckpt_path='last', a path, or the model to use its current weights."
            )
            ckpt_path = "best"
    return resolve_ckpt_path(run, ckpt_path) if ckpt_path == "best" else ckpt_path


def restore_for_evaluation(run: Run, ckpt_path: Any) -> None:
    """Load ``ckpt_path`` (see ``evaluation_ckpt_path``) before validate/test/predict, if there is one."""
    checkpoint = load_for(run, ckpt_path, run.weights_only) if ckpt_path is not None else None
    if checkpoint is not None:
        restore_checkpoint(run, checkpoint)


def load_for(run: Run, ckpt_path: Any, weights_only: bool | None = None) -> dict[str, Any] | None:
    """The checkpoint ``ckpt_path`` names ("best", "last" or a path), or None when "last" finds none.

    The path it resolves to becomes ``trainer.ckpt_path``.
    """
    path = resolve_ckpt_path(run, ckpt_path)
    if path is None:
        return None
    run.context.ckpt_path = path
    checkpoint = check_trainer_checkpoint(run.runtime.strategy.load_checkpoint(path, weights_only=weights_only),
                                          path)
    if is_lightning_checkpoint(checkpoint):
        resuming = run.state.fn == TrainerFn.FITTING
        checkpoint = from_lightning(checkpoint, run.datamodule, path, resuming)
    return checkpoint


def _last_checkpoint(run: Run) -> str | None:
    """The newest complete "last" checkpoint of the checkpoint callbacks; None, with a warning as in Lightning,
    when there is none yet; when every one there is broken, the newest complete checkpoint beside them."""
    candidates: list[str] = []
    directories: list[str] = []
    for callback in run.checkpoint_callbacks:
        if isinstance(callback, ModelCheckpoint):
            for name in callback.last_checkpoint_names():
                if exists(name) or exists(name + SET_ASIDE_SUFFIX):
                    candidates.append(complete_checkpoint_at(name, run.runtime.strategy.checkpoint_io.is_complete)
                                      or name)
            if callback.dirpath is not None:
                directories.append(callback.dirpath)
        elif getattr(callback, "last_model_path", "") and exists(callback.last_model_path):
            candidates.append(callback.last_model_path)
    if not candidates:
        console.warn_user("ckpt_path='last' is set, but there is no last checkpoint yet, so none is loaded. "
                          "ModelCheckpoint(save_last=True) writes one.")
        return None
    return _whole_or_beside(run, "last", candidates, directories)


def _whole_or_beside(run: Run, name: str, candidates: list[str], directories: list[str]) -> str:
    """The newest complete of ``candidates`` (what ckpt_path=``name`` names, complete as the run's checkpoint IO
    judges); when all are broken, the newest complete checkpoint in ``directories``; a warning names what was
    passed over, and a CheckpointError says when nothing whole is left. Never a silent fresh start."""
    is_complete = run.runtime.strategy.checkpoint_io.is_complete
    choice = choose_checkpoint(candidates, is_complete)
    path = choice.path
    if path is None:
        beside = (p for directory in directories for p in complete_checkpoints_in(directory, is_complete=is_complete))
        path = choose_checkpoint(beside, is_complete).path
        if path is None:
            raise CheckpointError(
                f"ckpt_path={name!r}: {_listed(choice.broken)} {'is' if len(choice.broken) == 1 else 'are'} "
                "incomplete or damaged (a save cut short, or a copy cut off), and there is no complete checkpoint "
                "beside it to resume from. Pass ckpt_path=<a whole checkpoint> or start afresh (ckpt_path=None)."
            )
    if choice.broken:
        console.warn_user(f"ckpt_path={name!r}: {_listed(choice.broken)} is incomplete or damaged (a save cut short, "
                          f"or a copy cut off), so the run resumes from {path}, the newest complete checkpoint "
                          f"{'of them' if choice.path else 'beside it'}.")
    return path


def _listed(paths: Any) -> str:
    return ", ".join(str(path) for path in paths)


def resolve_ckpt_path(run: Run, ckpt_path: Any) -> str | None:
    """"best": the checkpoint callback's best file; "last": the newest last checkpoint of the checkpoint
    callbacks (None, with a warning, when there is none yet, as in Lightning); else the path itself."""
    if ckpt_path == "best":
        callbacks = run.checkpoint_callbacks
        if len(callbacks) > 1:
            console.warn_user("ckpt_path='best' with several checkpoint callbacks uses the first one's best file.")
        best = getattr(callbacks[0], "best_model_path", "") if callbacks else ""
        if not best:
            raise MisconfigurationError(
                "ckpt_path='best' needs a ModelCheckpoint that has saved a best checkpoint; "
                + ("there is no ModelCheckpoint." if not callbacks else "it has saved none yet.")
                + " Pass a file path instead."
            )
        return os.fspath(best)
    if ckpt_path == "last":
        return _last_checkpoint(run)
    if ckpt_path == "hpc":
        found = hpc_checkpoints(run.settings.default_root_dir)
        if not found:
            raise MisconfigurationError(f"ckpt_path='hpc': there is no preemption checkpoint "
                                        f"(hpc_ckpt_<n>.ckpt) in default_root_dir={run.settings.default_root_dir!r}.")
        return _whole_or_beside(run, "hpc", found, [run.settings.default_root_dir])
    if not isinstance(ckpt_path, (str, os.PathLike)):
        raise MisconfigurationError(
            f"ckpt_path={describe(ckpt_path)}: accepted 'best', 'last', 'hpc', or a path to a checkpoint file."
        )
    return os.fspath(ckpt_path)
