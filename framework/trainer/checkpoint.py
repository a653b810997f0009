"""Assembling the checkpoint dict from a trainer, and restoring a trainer from one."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from framework import console
from framework.callbacks.model_checkpoint import ModelCheckpoint
from framework.errors import CheckpointError, MisconfigurationError, describe
from framework.hparams import checkpoint_safe
from framework.io.checkpoint import (
    SET_ASIDE_SUFFIX,
    check_trainer_checkpoint,
    choose_checkpoint,
    complete_checkpoint_at,
    complete_checkpoints_in,
)
from framework.io.checkpoint_file import FORMAT_VERSION
from framework.io.fs import exists
from framework.runtime.preemption import job_identity
from framework.seed import rng_states
from framework.trainer.dispatch import call_refusing_logs
from framework.trainer.lightning_checkpoint import from_lightning, is_lightning_checkpoint, lightning_progress
from framework.trainer.preemption import hpc_checkpoints
from framework.trainer.state import TrainerFn
from framework.version import __version__

if TYPE_CHECKING:
    from framework.trainer.trainer import Trainer


def dump_checkpoint(trainer: Trainer, weights_only: bool = False) -> dict[str, Any]:
    """Everything needed to resume: weights, optimizers, schedulers, counters, callbacks, precision."""
    state = trainer.state
    module = trainer.module
    checkpoint: dict[str, Any] = {
        "framework_version": __version__,
        "format_version": FORMAT_VERSION,
        "epoch": state.current_epoch,
        "global_step": state.global_step,
        "loops": {"fit": {**state.state_dict(), "rng_states": _rng_states(trainer), **_epoch_so_far(trainer),
                          "job_id": job_identity()}},
        "state_dict": trainer.runtime.strategy.module_state_dict(trainer.model),
    }
    if not weights_only:
        checkpoint["loops"]["fit"]["logger_positions"] = [_position(logger) for logger in trainer.loggers]
        strategy, context = trainer.runtime.strategy, trainer.run_context
        checkpoint["optimizer_states"] = [strategy.optimizer_state(optimizer) for optimizer in context.optimizers]
        checkpoint["lr_schedulers"] = [config.scheduler.state_dict() for config in context.lr_scheduler_configs]
        checkpoint["precision"] = trainer.runtime.precision.state_dict()
        checkpoint["callbacks"] = callback_states(trainer.callbacks)
        if trainer.datamodule is not None:
            checkpoint["datamodule"] = trainer.datamodule.state_dict()
    if module.hparams:
        checkpoint["hyper_parameters"] = checkpoint_safe(dict(module.hparams))
        checkpoint["hparams_name"] = module._hparams_name
    if trainer.datamodule is not None and trainer.datamodule.hparams:
        checkpoint["datamodule_hyper_parameters"] = checkpoint_safe(dict(trainer.datamodule.hparams))
    for callback in trainer.callbacks:  # as in Lightning, neither may self.log here
        call_refusing_logs(module, "Callback.on_save_checkpoint", callback.on_save_checkpoint, trainer, module,
                           checkpoint)
    call_refusing_logs(module, "on_save_checkpoint", module.on_save_checkpoint, checkpoint)
    return checkpoint


def _position(logger: Any) -> dict[str, Any]:
    position = getattr(logger, "checkpoint_position", None)
    return position() if callable(position) else {}


def resume_logs(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    """Resuming fit: each logger drops what an interrupted run logged after ``checkpoint`` (the resumed run logs it
    again). Matched by position among the loggers; a logger whose folder changed starts afresh in its own."""
    positions = checkpoint.get("loops", {}).get("fit", {}).get("logger_positions", [])
    for logger, position in zip(trainer.loggers, positions, strict=False):
        resume_at = getattr(logger, "resume_at", None)
        if position and callable(resume_at):
            resume_at(position)


def _epoch_so_far(trainer: Trainer) -> dict[str, Any]:
    """Inside fit: what the epoch logged so far, and whether the batch the save is taken in (from
    ``on_train_batch_end``) ended with an optimizer step, so a run resumed from here logs what this one would."""
    if trainer.fit_loop is None or trainer.state.fn != TrainerFn.FITTING:
        return {}
    results = trainer.runtime.strategy.all_gather_object(trainer.train_results.state_dict())  # every rank's
    return {"train_results": results, "batch_stepped": trainer.fit_loop.batch_stepped}


def _rng_states(trainer: Trainer) -> list[dict[str, Any]]:
    """The random state training goes on from, so a resumed run draws the same dropout masks (and so on)."""
    fit_loop = trainer.fit_loop
    mine = fit_loop.training_rng_states() if fit_loop is not None else rng_states()
    return trainer.runtime.strategy.all_gather_object(mine)  # every rank's, in rank order


def rng_state_of_rank(saved: list[dict[str, Any]] | None, rank: int) -> dict[str, Any] | None:
    """The saved random state (or another per-rank entry) for global ``rank`` (None when the checkpoint has none;
    rank 0's when it was saved by fewer ranks)."""
    if not saved:
        return None
    return saved[rank] if rank < len(saved) else saved[0]


def callback_states(callbacks: list[Any]) -> dict[str, Any]:
    """Each callback's non-empty ``state_dict()`` under its ``state_key`` (unique: ``check_state_keys``)."""
    states = {callback.state_key: callback.state_dict() for callback in callbacks}
    return {key: state for key, state in states.items() if state}


def restore_checkpoint(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    """Load ``checkpoint``'s weights, DataModule state and callback states into the run (every stage).

    The order is Lightning's: the Module's ``on_load_checkpoint``, the weights, the
    DataModule's state, then each callback's ``on_load_checkpoint`` and state. Resuming
    fit adds ``restore_training_state`` once the optimizers exist (and ``restore_optimizer_states`` after on_fit_start).
    """
    trainer.module.on_load_checkpoint(checkpoint)
    trainer.runtime.strategy.load_module_state(trainer.model, checkpoint["state_dict"],
                                               strict=trainer.module.strict_loading)
    if trainer.datamodule is not None and "datamodule" in checkpoint:
        trainer.datamodule.load_state_dict(checkpoint["datamodule"])
    for callback in trainer.callbacks:
        callback.on_load_checkpoint(trainer, trainer.module, checkpoint)
    saved_callbacks = checkpoint.get("callbacks", {})
    for callback in trainer.callbacks:
        if callback.state_key in saved_callbacks:
            callback.load_state_dict(saved_callbacks[callback.state_key])
        elif trainer.state.fn == TrainerFn.FITTING:
            _warn_if_settings_changed(callback, saved_callbacks)


def _warn_if_settings_changed(callback: Any, saved: dict[str, Any]) -> None:
    # Lightning starts such a callback afresh without a word; a monitor changed by mistake would then quietly
    # reset EarlyStopping's patience. Not an error: changing the monitor on resume may be meant.
    kind = type(callback).__qualname__
    others = [key for key in saved if key.startswith(kind + "{")]
    if others and callback.state_key.startswith(kind + "{"):
        console.warn_user(
            f"The checkpoint holds the state of {', '.join(others)}, but this run's callback is {callback.state_key}: "
            "its settings changed, so it starts afresh (for EarlyStopping: its patience count and best score) instead "
            "of going on. Resume with the checkpoint's settings to continue from its state."
        )


def restore_for_fit(trainer: Trainer, checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """The part of resuming fit that comes before ``configure_optimizers``: refuse a checkpoint training cannot
    resume from, load the weights, DataModule and callback states, and the data order (which
    ``configure_optimizers`` may need, if it builds the training loader). Returns this rank's saved random state,
    for the loop to put back where it was taken."""
    check_resumable(checkpoint)
    restore_checkpoint(trainer, checkpoint)
    resume_logs(trainer, checkpoint)
    saved_loop = checkpoint.get("loops", {}).get("fit", {})
    trainer.state.shuffle_seed = int(saved_loop.get("shuffle_seed", -1))
    return rng_state_of_rank(saved_loop.get("rng_states"), trainer.global_rank)


def check_resumable(checkpoint: dict[str, Any]) -> None:
    """Refuse, before anything is loaded, a checkpoint that training cannot resume from."""
    if "optimizer_states" not in checkpoint:
        raise MisconfigurationError(
            "The checkpoint holds weights only (saved with weights_only=True), so training cannot resume from it. "
            "Load the weights with Module.load_from_checkpoint and start a new fit instead."
        )


def restore_training_state(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    """Load the precision's and loop counters' state, to resume fit (``on_fit_start`` sees where it resumes)."""
    _check_count("optimizer", trainer.run_context.optimizers, checkpoint["optimizer_states"])
    _check_count("LR scheduler", trainer.run_context.lr_scheduler_configs, checkpoint.get("lr_schedulers", []))
    trainer.runtime.precision.load_state_dict(checkpoint.get("precision", {}))
    _restore_counters(trainer, checkpoint)


def restore_optimizer_states(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    """Load the optimizers' and LR schedulers' state. After ``on_fit_start``, as in Lightning: a callback may
    add the parameter groups there that the saved state holds (BaseFinetuning)."""
    context = trainer.run_context
    for optimizer, saved in zip(context.optimizers, checkpoint["optimizer_states"], strict=True):
        trainer.runtime.strategy.load_optimizer_state(optimizer, saved)
    for config, saved in zip(context.lr_scheduler_configs, checkpoint.get("lr_schedulers", []), strict=True):
        config.scheduler.load_state_dict(saved)


def _check_count(what: str, configured: list, saved: list) -> None:
    if len(configured) != len(saved):
        raise MisconfigurationError(
            f"The checkpoint holds {len(saved)} {what} state(s) but configure_optimizers gives {len(configured)}; "
            "resume with the same configure_optimizers the checkpoint was saved with."
        )


def _restore_counters(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    state = trainer.state
    loops = checkpoint.get("loops", {})
    if "fit" in loops:
        state.load_state_dict(loops["fit"])
        if state.epoch_finished:  # saved in the epoch-end hooks of a whole epoch: resume with the next one
            state.current_epoch += 1
            state.batch_idx, state.order_epoch, state.epoch_finished = 0, -1, False
    else:  # a checkpoint assembled by hand: its epoch and step are all there is
        state.load_state_dict(lightning_progress(checkpoint))
    _check_epochs_left(trainer)


def _check_epochs_left(trainer: Trainer) -> None:
    # Lightning refuses this too: training would end before it started, and a user who lowered
    # max_epochs to "train one more epoch" should learn that max_epochs counts from the first run.
    epochs, done = trainer.epoch_limit, trainer.state.current_epoch
    if epochs != -1 and done > epochs:
        raise MisconfigurationError(
            f"You restored a checkpoint with current_epoch={done}, but you have set Trainer(max_epochs={epochs}): "
            f"max_epochs counts all epochs, those before the checkpoint too. Set max_epochs above {done} to train on."
        )


def evaluation_ckpt_path(trainer: Trainer, fn: Any, ckpt_path: Any) -> Any:
    """validate/test/predict's ``ckpt_path`` with "best" made the file's path, before the run starts.

    Without a model or a path, the best checkpoint of the last fit, as in Lightning. Resolved
    before the run's ``configure_callbacks`` may replace the ModelCheckpoint that knows it.
    """
    if ckpt_path is None and not trainer._model_given:
        best = getattr(trainer.checkpoint_callback, "best_model_path", None)
        if best:
            console.warn_user(
                f"trainer.{fn.value}() was called without a model, so the best checkpoint of the last fit is "
                f"loaded ({best}), as Lightning does. Pass ckpt_path='best' to say so and silence this, or "
                "ckpt_path='last', a path, or the model to use its current weights."
            )
            ckpt_path = "best"
    return resolve_ckpt_path(trainer, ckpt_path) if ckpt_path == "best" else ckpt_path


def restore_for_evaluation(trainer: Trainer, ckpt_path: Any) -> None:
    """Load ``ckpt_path`` (see ``evaluation_ckpt_path``) before validate/test/predict, if there is one."""
    checkpoint = load_for(trainer, ckpt_path, trainer._weights_only) if ckpt_path is not None else None
    if checkpoint is not None:
        restore_checkpoint(trainer, checkpoint)


def load_for(trainer: Trainer, ckpt_path: Any, weights_only: bool | None = None) -> dict[str, Any] | None:
    """The checkpoint ``ckpt_path`` names ("best", "last" or a path), or None when "last" finds none.

    The path it resolves to becomes ``trainer.ckpt_path``.
    """
    path = resolve_ckpt_path(trainer, ckpt_path)
    if path is None:
        return None
    trainer.run_context.ckpt_path = path
    checkpoint = check_trainer_checkpoint(trainer.runtime.strategy.load_checkpoint(path, weights_only=weights_only),
                                          path)
    if is_lightning_checkpoint(checkpoint):
        resuming = trainer.state.fn == TrainerFn.FITTING
        checkpoint = from_lightning(checkpoint, trainer.datamodule, path, resuming)
    return checkpoint


def _last_checkpoint(trainer: Trainer) -> str | None:
    """The newest complete "last" checkpoint of the checkpoint callbacks; None, with a warning as in Lightning,
    when there is none yet; when every one there is broken, the newest complete checkpoint beside them."""
    candidates: list[str] = []
    directories: list[str] = []
    for callback in trainer.checkpoint_callbacks:
        if isinstance(callback, ModelCheckpoint):
            for name in callback.last_checkpoint_names():
                if exists(name) or exists(name + SET_ASIDE_SUFFIX):
                    candidates.append(complete_checkpoint_at(name) or name)
            if callback.dirpath is not None:
                directories.append(callback.dirpath)
        elif getattr(callback, "last_model_path", "") and exists(callback.last_model_path):
            candidates.append(callback.last_model_path)
    if not candidates:
        console.warn_user("ckpt_path='last' is set, but there is no last checkpoint yet, so none is loaded. "
                          "ModelCheckpoint(save_last=True) writes one.")
        return None
    return _whole_or_beside("last", candidates, directories)


def _whole_or_beside(name: str, candidates: list[str], directories: list[str]) -> str:
    """The newest complete of ``candidates`` (what ckpt_path=``name`` names); when all are broken, the newest
    complete checkpoint in ``directories``; a warning names what was passed over, and a CheckpointError says
    when nothing whole is left. Never a silent fresh start."""
    choice = choose_checkpoint(candidates)
    path = choice.path
    if path is None:
        path = choose_checkpoint(p for directory in directories for p in complete_checkpoints_in(directory)).path
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


def resolve_ckpt_path(trainer: Trainer, ckpt_path: Any) -> str | None:
    """"best": the checkpoint callback's best file; "last": the newest last checkpoint of the checkpoint
    callbacks (None, with a warning, when there is none yet, as in Lightning); else the path itself."""
    if ckpt_path == "best":
        callbacks = trainer.checkpoint_callbacks
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
        return _last_checkpoint(trainer)
    if ckpt_path == "hpc":
        found = hpc_checkpoints(trainer.default_root_dir)
        if not found:
            raise MisconfigurationError(f"ckpt_path='hpc': there is no preemption checkpoint "
                                        f"(hpc_ckpt_<n>.ckpt) in default_root_dir={trainer.default_root_dir!r}.")
        return _whole_or_beside("hpc", found, [trainer.default_root_dir])
    if not isinstance(ckpt_path, (str, os.PathLike)):
        raise MisconfigurationError(
            f"ckpt_path={describe(ckpt_path)}: accepted 'best', 'last', 'hpc', or a path to a checkpoint file."
        )
    return os.fspath(ckpt_path)
