"""``CheckpointIO``: how the Trainer saves, loads and removes checkpoint files (Lightning's plugin interface).

Every save, load and removal the Trainer and ``ModelCheckpoint`` make goes through the Trainer's
``checkpoint_io``: ``TorchCheckpointIO`` unless ``Trainer(plugins=[...])`` gives another. Subclass
``CheckpointIO`` (or ``TorchCheckpointIO``, to change one method) to store checkpoints your way::

    class CompressedIO(TorchCheckpointIO):
        def save_checkpoint(self, checkpoint, path, storage_options=None):
            ...

    Trainer(plugins=[CompressedIO()])

``TorchCheckpointIO`` keeps what framework guarantees of its files: written atomically (a reader sees the old
file or the whole new one), on any fsspec filesystem, and read without unpickling code unless
``weights_only=False``.
"""

from __future__ import annotations

import inspect
import os
from abc import ABC, abstractmethod
from typing import Any

from framework.io import checkpoint_storage
from framework.io.fs import exists

__all__ = ["CheckpointIO", "TorchCheckpointIO", "load_through"]


class CheckpointIO(ABC):
    """Saves, loads and removes checkpoints; the Trainer calls it on global rank 0 for files (every rank loads).

    Lightning's methods and arguments: subclasses written for Lightning work unchanged.
    """

    @abstractmethod
    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike,
                        storage_options: Any | None = None) -> None:
        """Write ``checkpoint`` (the Trainer's dict of states) to ``path``; ``storage_options`` as given to
        ``trainer.save_checkpoint``."""

    @abstractmethod
    def load_checkpoint(self, path: str | os.PathLike, map_location: Any | None = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        """The checkpoint at ``path``, its tensors placed by ``map_location``; ``weights_only=False`` may unpickle
        any object (only for files you trust)."""

    @abstractmethod
    def remove_checkpoint(self, path: str | os.PathLike) -> None:
        """Delete the checkpoint at ``path`` (nothing happens if there is none)."""

    def teardown(self) -> None:  # noqa: B027 - a hook with nothing to do by default, not an abstract method
        """Called when the run ends: release what the plugin holds (background writers, connections)."""

    def is_complete(self, path: str | os.PathLike) -> bool:
        """Whether ``path`` holds a whole checkpoint this plugin wrote, one a resume may start from (framework asks
        before ``ckpt_path="last"`` and automatic resume take a file; not a Lightning method). Here: that it is
        there, since a plugin of your own decides how its files are written."""
        return exists(path)

    @property
    def requires_cpu_collectives(self) -> bool:
        """Whether the plugin needs CPU collectives across ranks (never, for the ones here)."""
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class TorchCheckpointIO(CheckpointIO):
    """``torch.save``'s format, written atomically on any fsspec filesystem and read safely: the default.

    ``storage_options`` go to the filesystem (credentials, endpoints), where Lightning's refuses them.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike,
                        storage_options: Any | None = None) -> None:
        """Write ``checkpoint`` to ``path`` atomically (a temporary name renamed into place)."""
        checkpoint_storage.save_checkpoint(checkpoint, path, storage_options)

    def load_checkpoint(self, path: str | os.PathLike, map_location: Any | None = "cpu",
                        weights_only: bool | None = None) -> dict[str, Any]:
        """Read ``path`` (a file, or a sharded checkpoint directory read whole), its tensors on the CPU unless
        ``map_location`` says otherwise, without unpickling code unless ``weights_only=False``; a damaged file is a
        ``CheckpointError`` naming it."""
        return checkpoint_storage.load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path: str | os.PathLike) -> None:
        """Delete ``path`` (a file, a link, or a checkpoint directory, which stops counting as complete first)."""
        checkpoint_storage.remove_checkpoint(path)

    def is_complete(self, path: str | os.PathLike) -> bool:
        """Whether ``path`` is whole: an archive ending with its end record, a directory with its commit marker
        (``framework.io.is_complete_checkpoint``). A subclass that writes its own format: that it is there."""
        if type(self).save_checkpoint is not TorchCheckpointIO.save_checkpoint:
            return super().is_complete(path)
        return checkpoint_storage.is_complete_checkpoint(path)


def load_through(checkpoint_io: CheckpointIO, path: str | os.PathLike, weights_only: bool | None) -> dict[str, Any]:
    """``checkpoint_io.load_checkpoint(path, weights_only=...)``, as Lightning calls it (the plugin's own default
    ``map_location``; ``TorchCheckpointIO``'s is the CPU). ``weights_only`` goes only to a plugin that takes it: one
    written for Lightning before 2.4 does not."""
    if _takes(checkpoint_io.load_checkpoint, "weights_only"):
        return checkpoint_io.load_checkpoint(path, weights_only=weights_only)
    return checkpoint_io.load_checkpoint(path)


def _takes(method: Any, name: str) -> bool:
    parameters = inspect.signature(method).parameters.values()
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
