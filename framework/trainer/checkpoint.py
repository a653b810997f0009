"""Assembling the checkpoint dict from a trainer, and restoring a trainer from one."""

from __future__ import annotations

import os
from typing import Any

from framework.errors import MisconfigurationError, describe
from framework.hooks import Hook
from framework.hparams import checkpoint_safe


def framework_version() -> str:
    """``framework.__version__``, which every checkpoint records."""
    from framework import __version__

    return __version__


def dump_checkpoint(trainer: Any, weights_only: bool = False) -> dict[str, Any]:
    """Everything needed to resume: weights, optimizers, schedulers, counters, callbacks, precision."""
    state = trainer.state
    module = trainer.module
    checkpoint: dict[str, Any] = {
        "framework_version": framework_version(),
        "epoch": state.current_epoch,
        "global_step": state.global_step,
        "loops": {"fit": state.state_dict()},
        "state_dict": trainer.runtime.strategy.module_state_dict(trainer.model),
    }
    if not weights_only:
        checkpoint["optimizer_states"] = [optimizer.state_dict() for optimizer in trainer.optimizers]
        checkpoint["lr_schedulers"] = [config.scheduler.state_dict() for config in trainer.lr_scheduler_configs]
        checkpoint["precision"] = trainer.runtime.precision.state_dict()
        checkpoint["callbacks"] = {cb.state_key: cb.state_dict() for cb in trainer.callbacks}
        if trainer.datamodule is not None:
            checkpoint["datamodule"] = trainer.datamodule.state_dict()
    if module.hparams:
        checkpoint["hyper_parameters"] = checkpoint_safe(dict(module.hparams))
    for callback in trainer.callbacks:
        callback.on_save_checkpoint(trainer, module, checkpoint)
    module.on_save_checkpoint(checkpoint)
    return checkpoint


def restore_checkpoint(trainer: Any, checkpoint: dict[str, Any], training: bool) -> None:
    """Load ``checkpoint`` into the trainer's module (and, when ``training``, everything needed to resume)."""
    trainer.hooks.call(Hook.ON_LOAD_CHECKPOINT, checkpoint)
    if "state_dict" not in checkpoint:
        raise MisconfigurationError("The checkpoint has no 'state_dict' entry; it was not written by a Trainer.")
    trainer.runtime.strategy.unwrap(trainer.model).load_state_dict(checkpoint["state_dict"])
    if not training:
        return
    if "optimizer_states" not in checkpoint:
        raise MisconfigurationError(
            "The checkpoint holds weights only (saved with weights_only=True), so training cannot resume from it. "
            "Load the weights with Module.load_from_checkpoint and start a new fit instead."
        )
    _check_count("optimizer", trainer.optimizers, checkpoint["optimizer_states"])
    _check_count("LR scheduler", trainer.lr_scheduler_configs, checkpoint.get("lr_schedulers", []))
    for optimizer, saved in zip(trainer.optimizers, checkpoint["optimizer_states"], strict=True):
        optimizer.load_state_dict(saved)
    for config, saved in zip(trainer.lr_scheduler_configs, checkpoint.get("lr_schedulers", []), strict=True):
        config.scheduler.load_state_dict(saved)
    trainer.runtime.precision.load_state_dict(checkpoint.get("precision", {}))
    saved_callbacks = checkpoint.get("callbacks", {})
    for callback in trainer.callbacks:
        if callback.state_key in saved_callbacks:
            callback.load_state_dict(saved_callbacks[callback.state_key])
    if trainer.datamodule is not None and "datamodule" in checkpoint:
        trainer.datamodule.load_state_dict(checkpoint["datamodule"])
    _restore_counters(trainer, checkpoint)


def _check_count(what: str, configured: list, saved: list) -> None:
    if len(configured) != len(saved):
        raise MisconfigurationError(
            f"The checkpoint holds {len(saved)} {what} state(s) but configure_optimizers gives {len(configured)}; "
            "resume with the same configure_optimizers the checkpoint was saved with."
        )


def _restore_counters(trainer: Any, checkpoint: dict[str, Any]) -> None:
    state = trainer.state
    loops = checkpoint.get("loops", {})
    if "fit" in loops:
        state.load_state_dict(loops["fit"])
        if state.epoch_finished:  # saved at the epoch's end: resume with the next one
            state.current_epoch += 1
            state.batch_idx = 0
            state.epoch_finished = False
    else:  # a Lightning checkpoint: epoch and global_step only, resumed at the next epoch
        state.current_epoch = int(checkpoint.get("epoch", -1)) + 1
        state.global_step = int(checkpoint.get("global_step", 0))
        state.batches_stepped = state.global_step


def load_for(trainer: Any, ckpt_path: Any) -> dict[str, Any]:
    """The checkpoint ``ckpt_path`` names: "best", "last" (from the checkpoint callback) or a path."""
    path = ckpt_path
    if ckpt_path in ("best", "last"):
        callback = trainer.checkpoint_callback
        path = getattr(callback, f"{ckpt_path}_model_path", None) if callback is not None else None
        if not path:
            raise MisconfigurationError(
                f"ckpt_path={ckpt_path!r} needs a checkpoint callback that has saved a {ckpt_path} checkpoint; "
                "there is none. Pass a file path instead."
            )
    elif not isinstance(ckpt_path, (str, os.PathLike)):
        raise MisconfigurationError(
            f"ckpt_path={describe(ckpt_path)}: accepted 'best', 'last', or a path to a checkpoint file."
        )
    return trainer.runtime.strategy.load_checkpoint(os.fspath(path))
