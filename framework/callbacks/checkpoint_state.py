"""What ``ModelCheckpoint`` keeps in a checkpoint of its own: its best k files and their scores, the best and last
paths, so a resumed run goes on ranking against the same files (``ModelCheckpoint`` subclasses ``TopKState``).

No ``from __future__ import annotations`` here (see ``framework.callbacks``).
"""

import os
import warnings
from typing import Any

from framework.callbacks.checkpoint_files import write_scores


class TopKState:
    """``state_dict``, ``load_state_dict`` and ``to_yaml`` of ``ModelCheckpoint``'s top-k bookkeeping."""

    def state_dict(self) -> dict[str, Any]:
        """The top-k bookkeeping, so a resumed run keeps ranking against the same files."""
        return {
            "monitor": self.monitor,
            "best_model_score": self.best_model_score,
            "best_model_path": self.best_model_path,
            "current_score": self.current_score,
            "dirpath": self.dirpath,
            "best_k_models": dict(self.best_k_models),
            "kth_best_model_path": self.kth_best_model_path,
            "kth_value": self.kth_value,
            "last_model_path": self.last_model_path,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the bookkeeping; if the directory changed since, only ``best_model_path`` (with a warning)."""
        saved_dir = state_dict.get("dirpath", self.dirpath)
        if saved_dir == self.dirpath:
            self.best_model_score = state_dict["best_model_score"]
            self.kth_best_model_path = state_dict.get("kth_best_model_path", self.kth_best_model_path)
            self.kth_value = state_dict.get("kth_value", self.kth_value)
            self.best_k_models = dict(state_dict.get("best_k_models", self.best_k_models))
            self.last_model_path = state_dict.get("last_model_path", self.last_model_path)
            self.current_score = state_dict.get("current_score", self.current_score)
        else:
            # The top k of another directory: kept, this run's files would be ranked against files it does not
            # manage (and last_model_path would name one of them).
            warnings.warn(f"The dirpath has changed from {saved_dir!r} to {self.dirpath!r}: only best_model_path is "
                          "restored; best_model_score, best_k_models, kth_best_model_path, kth_value and "
                          "last_model_path start afresh.", UserWarning, stacklevel=2)
        self.best_model_path = state_dict["best_model_path"]

    def to_yaml(self, filepath: str | os.PathLike | None = None) -> None:
        """Write ``best_k_models`` (path: score) to ``filepath`` (default ``<dirpath>/best_k_models.yaml``)."""
        write_scores(self.best_k_models, filepath if filepath is not None else
                     os.path.join(self.dirpath or ".", "best_k_models.yaml"))
