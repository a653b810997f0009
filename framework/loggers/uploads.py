"""Checkpoint files for the loggers that upload them (``log_model`` of MLflow and W&B): when, which, and what
goes with each."""

from __future__ import annotations

import os
from typing import Any

from framework.errors import MisconfigurationError, describe


def check_log_model(owner: str, log_model: Any) -> None:
    """Refuse a ``log_model`` other than False, True or "all", naming the logger."""
    if log_model not in (False, True, "all") or isinstance(log_model, int) and not isinstance(log_model, bool):
        raise MisconfigurationError(f"{owner}(log_model={describe(log_model)}): accepted False, True (the best and "
                                    "last checkpoints when training ends) or 'all' (every checkpoint when saved).")


def upload_at_once(log_model: bool | str, checkpoint_callback: Any) -> bool:
    """Whether a checkpoint just saved goes up now: with ``log_model="all"``, or with True when the callback keeps
    every file (``save_top_k=-1``). Otherwise, with True, the callback's files go up when training ends."""
    return log_model == "all" or log_model is True and getattr(checkpoint_callback, "save_top_k", None) == -1


def files_to_upload(checkpoint_callback: Any, uploaded: dict[str, float]) -> list[tuple[float, str, Any, str]]:
    """``(modified, path, score, tag)`` of the callback's last, best and top-k files not uploaded since they last
    changed, oldest first. ``uploaded`` maps a path to its modification time when it went up."""
    found: dict[str, tuple[Any, str]] = {}
    if getattr(checkpoint_callback, "last_model_path", ""):
        found[checkpoint_callback.last_model_path] = (getattr(checkpoint_callback, "current_score", None), "latest")
    if getattr(checkpoint_callback, "best_model_path", ""):
        found[checkpoint_callback.best_model_path] = (getattr(checkpoint_callback, "best_model_score", None), "best")
    for path, score in getattr(checkpoint_callback, "best_k_models", {}).items():
        found[path] = (score, "best_k")
    rows = []
    for path, (score, tag) in found.items():
        if os.path.isfile(path):
            modified = os.path.getmtime(path)
            if uploaded.get(path, -1.0) < modified:
                rows.append((modified, path, score, tag))
    return sorted(rows, key=lambda row: (row[0], row[1]))


def checkpoint_metadata(checkpoint_callback: Any, path: str, score: Any, settings_key: str) -> dict[str, Any]:
    """The score, the file's name and the callback's settings, stored beside an uploaded checkpoint."""
    settings = ("monitor", "mode", "save_last", "save_top_k", "save_weights_only", "_every_n_train_steps",
                "_every_n_epochs")
    return {
        "score": score.item() if hasattr(score, "item") else score,
        "original_filename": os.path.basename(path),
        settings_key: {name: getattr(checkpoint_callback, name) for name in settings
                       if hasattr(checkpoint_callback, name)},
    }


def aliases_of(checkpoint_callback: Any, path: str) -> list[str]:
    """``["latest", "best"]`` for the best file, ``["latest"]`` for the others."""
    return ["latest", "best"] if path == getattr(checkpoint_callback, "best_model_path", None) else ["latest"]


class CheckpointUploading:
    """The bookkeeping of a logger that uploads checkpoint files (``log_model``), for MLflow's and W&B's: which
    callbacks' files go up now and which when training ends, and which files went up already (not again unless
    they changed). The logger says how one file goes up (``_upload_file``)."""

    _log_model: bool | str

    def _start_uploads(self, log_model: bool | str) -> None:
        self._log_model = log_model
        self._uploaded: dict[str, float] = {}  # checkpoint path -> its modification time when uploaded
        self._to_upload_at_end: dict[int, Any] = {}  # id -> checkpoint callback, with log_model=True

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Upload the callback's files now, or remember it for the end of training, as ``log_model`` says."""
        if upload_at_once(self._log_model, checkpoint_callback):
            self._upload(checkpoint_callback)
        elif self._log_model is True:
            self._to_upload_at_end[id(checkpoint_callback)] = checkpoint_callback

    def _upload_kept(self) -> None:
        """Upload the files of the callbacks kept for the end of training."""
        for checkpoint_callback in self._to_upload_at_end.values():
            self._upload(checkpoint_callback)
        self._to_upload_at_end.clear()

    def _upload(self, checkpoint_callback: Any) -> None:
        for modified, path, score, _tag in files_to_upload(checkpoint_callback, self._uploaded):
            self._upload_file(checkpoint_callback, path, score)
            self._uploaded[path] = modified

    def _upload_file(self, checkpoint_callback: Any, path: str, score: Any) -> None:
        raise NotImplementedError

    def _without_kept_callbacks(self, state: dict[str, Any]) -> dict[str, Any]:
        """A pickled copy (another process's) keeps no callbacks of this one to upload at its end."""
        state["_to_upload_at_end"] = {}
        return state
