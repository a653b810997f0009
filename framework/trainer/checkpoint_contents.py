"""What a checkpoint holds: the dict assembled from a run (``dump_checkpoint``), and a run restored from one
(``restore_checkpoint``, and for a resumed fit ``restore_for_fit`` / ``restore_training_state`` /
``restore_optimizer_states`` at their places in fit's start). Which file a ``ckpt_path`` names is in
``checkpoint_paths``; how files are written and read safely, in ``framework.io``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from framework import console
from framework.errors import MisconfigurationError
from framework.hooks import Hook, Owner
from framework.hparams import checkpoint_safe
from framework.io.checkpoint_file import FORMAT_VERSION
from framework.runtime.preemption_signals import job_identity
from framework.seed import rng_states
from framework.trainer.auto_resume import consume_preemption_checkpoints
from framework.trainer.lightning_checkpoint import lightning_progress
from framework.trainer.state import TrainerFn
from framework.version import __version__

if TYPE_CHECKING:
    from framework.trainer.run import Run


def dump_checkpoint(run: Run, weights_only: bool = False) -> dict[str, Any]:
    """Everything needed to resume: weights, optimizers, schedulers, counters, callbacks, precision."""
    state = run.state
    module = run.module
    checkpoint: dict[str, Any] = {
        "framework_version": __version__,
        "format_version": FORMAT_VERSION,
        "epoch": state.current_epoch,
        "global_step": state.global_step,
        "loops": {"fit": {**state.state_dict(), "rng_states": _rng_states(run), **_epoch_so_far(run),
                          "job_id": job_identity()}},
        "state_dict": run.runtime.strategy.module_state_dict(run.model),
    }
    if not weights_only:
        checkpoint["loops"]["fit"]["logger_positions"] = [_position(logger) for logger in run.loggers]
        checkpoint["loops"]["fit"].update(_epoch_end_row(run))
        strategy, context = run.runtime.strategy, run.context
        checkpoint["optimizer_states"] = [strategy.optimizer_state(optimizer) for optimizer in context.optimizers]
        checkpoint["lr_schedulers"] = [config.scheduler.state_dict() for config in context.lr_scheduler_configs]
        checkpoint["precision"] = run.runtime.precision.state_dict()
        checkpoint["callbacks"] = callback_states(run.callbacks)
        if run.datamodule is not None:
            checkpoint["datamodule"] = run.datamodule.state_dict()
    if module.hparams:
        checkpoint["hyper_parameters"] = checkpoint_safe(dict(module.hparams))
        checkpoint["hparams_name"] = module._hparams_name
    if run.datamodule is not None and run.datamodule.hparams:
        checkpoint["datamodule_hyper_parameters"] = checkpoint_safe(dict(run.datamodule.hparams))
    hooks = run.hooks or run.resolve_hooks()  # a save outside a run set up here (after ranks it started) has none
    hooks.call(Hook.ON_SAVE_CHECKPOINT, checkpoint)  # callbacks, then the Module; neither may self.log here
    return checkpoint


def save_checkpoint(run: Run, filepath: str, weights_only: bool | None = None,
                    storage_options: dict[str, Any] | None = None) -> None:
    """Write ``run``'s checkpoint to ``filepath`` through the strategy (``Trainer.save_checkpoint``)."""
    run.runtime.strategy.save_checkpoint(dump_checkpoint(run, bool(weights_only)), filepath,
                                         storage_options=storage_options)
    if not weights_only:
        consume_preemption_checkpoints(run)  # this fit went on past them


def _position(logger: Any) -> dict[str, Any]:
    position = getattr(logger, "checkpoint_position", None)
    return position() if callable(position) else {}


def resume_logs(run: Run, checkpoint: dict[str, Any]) -> None:
    """Resuming fit: each logger drops what an interrupted run logged after ``checkpoint`` (the resumed run logs it
    again). Matched by position among the loggers; a logger whose folder changed starts afresh in its own. A
    checkpoint saved in an epoch's end hooks hands them that epoch's row too, which the resumed run (going on with
    the next epoch) does not write."""
    saved_loop = checkpoint.get("loops", {}).get("fit", {})
    row = saved_loop.get("epoch_end_row")
    for logger, position in zip(run.loggers, saved_loop.get("logger_positions", []), strict=False):
        resume_at = getattr(logger, "resume_at", None)
        if position and callable(resume_at):
            resume_at(position, **({"epoch_end_row": row} if row else {}))


def _epoch_end_row(run: Run) -> dict[str, Any]:
    """Saved in the end hooks of a whole training epoch (ModelCheckpoint's save at an epoch's end): the row the
    epoch's end writes to the loggers after those hooks, as it stands now."""
    state, train_results = run.state, getattr(run, "train_results", None)
    if not state.epoch_finished or train_results is None or run.metrics.ending is not train_results:
        return {}
    metrics = run.metrics.ending_row()
    return {"epoch_end_row": {"metrics": {**metrics, "epoch": state.current_epoch}, "step": state.epoch_row_step}
            if metrics else {}}


def _epoch_so_far(run: Run) -> dict[str, Any]:
    """Inside fit: what the epoch logged so far, and whether the batch the save is taken in (from
    ``on_train_batch_end``) ended with an optimizer step, so a run resumed from here logs what this one would."""
    if run.fit_loop is None or run.state.fn != TrainerFn.FITTING:
        return {}
    results = run.runtime.strategy.all_gather_object(run.train_results.state_dict())  # every rank's
    return {"train_results": results, "batch_stepped": run.fit_loop.batch_stepped}


def _rng_states(run: Run) -> list[dict[str, Any]]:
    """The random state training goes on from, so a resumed run draws the same dropout masks (and so on)."""
    fit_loop = run.fit_loop
    mine = fit_loop.training_rng_states() if fit_loop is not None else rng_states()
    return run.runtime.strategy.all_gather_object(mine)  # every rank's, in rank order


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


def restore_checkpoint(run: Run, checkpoint: dict[str, Any]) -> None:
    """Load ``checkpoint``'s weights, DataModule state and callback states into the run (every stage).

    The order is Lightning's: the Module's ``on_load_checkpoint``, the weights, the
    DataModule's state, then each callback's ``on_load_checkpoint`` and state. Resuming
    fit adds ``restore_training_state`` once the optimizers exist (and ``restore_optimizer_states`` after on_fit_start).
    """
    run.hooks.call(Hook.ON_LOAD_CHECKPOINT, checkpoint, only=Owner.MODULE)
    run.runtime.strategy.load_module_state(run.model, checkpoint["state_dict"], strict=run.module.strict_loading)
    if run.datamodule is not None and "datamodule" in checkpoint:
        run.datamodule.load_state_dict(checkpoint["datamodule"])
    run.hooks.call(Hook.ON_LOAD_CHECKPOINT, checkpoint, only=Owner.CALLBACK)
    saved_callbacks = checkpoint.get("callbacks", {})
    for callback in run.callbacks:
        if callback.state_key in saved_callbacks:
            callback.load_state_dict(saved_callbacks[callback.state_key])
        elif run.state.fn == TrainerFn.FITTING:
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


def restore_for_fit(run: Run, checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """The part of resuming fit that comes before ``configure_optimizers``: refuse a checkpoint training cannot
    resume from, load the weights, DataModule and callback states, and the data order (which
    ``configure_optimizers`` may need, if it builds the training loader). Returns this rank's saved random state,
    for the loop to put back where it was taken."""
    check_resumable(checkpoint)
    restore_checkpoint(run, checkpoint)
    resume_logs(run, checkpoint)
    saved_loop = checkpoint.get("loops", {}).get("fit", {})
    run.state.shuffle_seed = int(saved_loop.get("shuffle_seed", -1))
    return rng_state_of_rank(saved_loop.get("rng_states"), run.global_rank)


def check_resumable(checkpoint: dict[str, Any]) -> None:
    """Refuse, before anything is loaded, a checkpoint that training cannot resume from."""
    if "optimizer_states" not in checkpoint:
        raise MisconfigurationError(
            "The checkpoint holds weights only (saved with weights_only=True), so training cannot resume from it. "
            "Load the weights with Module.load_from_checkpoint and start a new fit instead."
        )


def restore_training_state(run: Run, checkpoint: dict[str, Any]) -> None:
    """Load the precision's and loop counters' state, to resume fit (``on_fit_start`` sees where it resumes)."""
    _check_count("optimizer", run.context.optimizers, checkpoint["optimizer_states"])
    _check_count("LR scheduler", run.context.lr_scheduler_configs, checkpoint.get("lr_schedulers", []))
    run.runtime.precision.load_state_dict(checkpoint.get("precision", {}))
    _restore_counters(run, checkpoint)


def restore_optimizer_states(run: Run, checkpoint: dict[str, Any]) -> None:
    """Load the optimizers' and LR schedulers' state. After ``on_fit_start``, as in Lightning: a callback may
    add the parameter groups there that the saved state holds (BaseFinetuning)."""
    context = run.context
    for optimizer, saved in zip(context.optimizers, checkpoint["optimizer_states"], strict=True):
        run.runtime.strategy.load_optimizer_state(optimizer, saved)
    for config, saved in zip(context.lr_scheduler_configs, checkpoint.get("lr_schedulers", []), strict=True):
        config.scheduler.load_state_dict(saved)


def _check_count(what: str, configured: list, saved: list) -> None:
    if len(configured) != len(saved):
        raise MisconfigurationError(
            f"The checkpoint holds {len(saved)} {what} state(s) but configure_optimizers gives {len(configured)}; "
            "resume with the same configure_optimizers the checkpoint was saved with."
        )


def _restore_counters(run: Run, checkpoint: dict[str, Any]) -> None:
    state = run.state
    loops = checkpoint.get("loops", {})
    if "fit" in loops:
        state.load_state_dict(loops["fit"])
        if state.epoch_finished:  # saved in the epoch-end hooks of a whole epoch: resume with the next one
            state.current_epoch += 1
            state.batch_idx, state.order_epoch, state.epoch_finished = 0, -1, False
    else:  # a checkpoint assembled by hand: its epoch and step are all there is
        state.load_state_dict(lightning_progress(checkpoint))
    _check_epochs_left(run)


def _check_epochs_left(run: Run) -> None:
    # Lightning refuses this too: training would end before it started, and a user who lowered
    # max_epochs to "train one more epoch" should learn that max_epochs counts from the first run.
    epochs, done = run.epoch_limit, run.state.current_epoch
    if epochs != -1 and done > epochs:
        raise MisconfigurationError(
            f"You restored a checkpoint with current_epoch={done}, but you have set Trainer(max_epochs={epochs}): "
            f"max_epochs counts all epochs, those before the checkpoint too. Set max_epochs above {done} to train on."
        )
