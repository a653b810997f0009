"""Checkpoints written by Lightning 2.x, read into our layout so a half-trained Lightning run goes on here.

The top-level names are shared (``state_dict``, ``optimizer_states``, ``lr_schedulers``,
``callbacks``, ``hyper_parameters``, ``epoch``, ``global_step``); what differs is the loop
progress, and the keys Lightning names after a class (the precision plugin's, the DataModule's).
"""

from __future__ import annotations

from typing import Any

from framework import console

# Top-level keys Lightning writes that have no counterpart here, and that losing costs nothing.
_LIGHTNING_METADATA = {"pytorch-lightning_version", "legacy_pytorch-lightning_version", "hparams_type"}
# Top-level keys both layouts share, and ours that Lightning lacks.
_SHARED = {"epoch", "global_step", "state_dict", "optimizer_states", "lr_schedulers", "callbacks",
           "hyper_parameters", "hparams_name", "datamodule_hyper_parameters", "loops"}


def is_lightning_checkpoint(checkpoint: dict[str, Any]) -> bool:
    """Whether Lightning (not this framework) wrote ``checkpoint``."""
    return "pytorch-lightning_version" in checkpoint and "format_version" not in checkpoint


def from_lightning(checkpoint: dict[str, Any], datamodule: Any, path: str, resuming: bool) -> dict[str, Any]:
    """``checkpoint`` in our layout; when ``resuming`` fit, a warning lists what it could not carry over.

    Example::

        checkpoint = torch.load("lightning.ckpt", weights_only=True)
        ours = from_lightning(checkpoint, datamodule=None, path="lightning.ckpt", resuming=False)
    """
    ours = {key: value for key, value in checkpoint.items() if key in _SHARED}
    left_out = []
    for key, value in checkpoint.items():
        if key in _SHARED or key in _LIGHTNING_METADATA:
            continue
        if key.endswith("Precision"):  # e.g. "MixedPrecision": the GradScaler's state
            ours["precision"] = value
        elif datamodule is not None and key == type(datamodule).__qualname__:
            ours["datamodule"] = value
        else:
            left_out.append(f"the {key!r} entry")
    ours["loops"] = {"fit": lightning_progress(checkpoint)}
    if resuming:
        _warn_left_out(checkpoint, path, left_out)
    return ours


def lightning_progress(checkpoint: dict[str, Any]) -> dict[str, int]:
    """Our loop counters from a Lightning checkpoint's loop progress (or from its epoch and step alone)."""
    global_step = int(checkpoint.get("global_step", 0))
    try:
        fit = checkpoint["loops"]["fit_loop"]
        epochs = fit["epoch_progress"]["current"]
        batches = fit["epoch_loop.batch_progress"]
        # started > processed: saved inside an epoch; batch_idx says how far (after its last batch, e.g.
        # from on_validation_end, it equals the epoch's length and the resumed run moves on to the next)
        in_epoch = epochs["started"] > epochs["processed"]
        return {
            "current_epoch": int(epochs["processed"]),
            "global_step": global_step,
            "batch_idx": int(batches["current"]["processed"]) if in_epoch else 0,
            "total_batch_idx": int(batches["total"]["processed"]),
            "batches_stepped": int(fit["epoch_loop.state_dict"]["_batches_that_stepped"]),
        }
    except (KeyError, TypeError):  # no loop progress: assume it was saved at an epoch's end
        return {"current_epoch": int(checkpoint.get("epoch", -1)) + 1, "global_step": global_step,
                "batches_stepped": global_step}


def _warn_left_out(checkpoint: dict[str, Any], path: str, left_out: list[str]) -> None:
    progress = lightning_progress(checkpoint)
    restored = ["the weights"]
    restored += ["the optimizer states"] if checkpoint.get("optimizer_states") else []
    restored += ["the LR scheduler states"] if checkpoint.get("lr_schedulers") else []
    epoch, step = progress["current_epoch"], progress["global_step"]
    restored += [f"the progress (going on in epoch {epoch} at global step {step})"]
    restored += ["the callback states"] if checkpoint.get("callbacks") else []
    restored += ["the precision state"] if any(key.endswith("Precision") for key in checkpoint) else []
    not_restored = [
        "Lightning's loop internals (the fit loop's optimizer and scheduler progress and the validate, test and "
        "predict loops' progress: this run keeps its own counters)",
        "the random state and the shuffle order, which Lightning does not save: the resumed epochs draw a new "
        "order, so the run will not equal an uninterrupted one (a resume from this framework's checkpoints does)",
        *left_out,
    ]
    console.warn_user(
        f"Resuming from {path!r}, written by Lightning {checkpoint['pytorch-lightning_version']}. Restored: "
        f"{', '.join(restored)}. Not restored: {'; '.join(not_restored)}.",
    )
