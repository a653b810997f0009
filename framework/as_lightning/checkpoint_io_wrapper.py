"""Lightning's ``_WrappingCheckpointIO``: a ``CheckpointIO`` that hands every call to the one it wraps, the base
libraries subclass for their own wrappers (an async writer, an uploader).

Example::

    class UploadAfterSave(_WrappingCheckpointIO):
        def save_checkpoint(self, checkpoint, path, storage_options=None):
            self.checkpoint_io.save_checkpoint(checkpoint, path, storage_options)
            upload(path)
"""

from __future__ import annotations

import os
from typing import Any

from framework.io.checkpoint_io import CheckpointIO, TorchCheckpointIO, load_through

__all__ = ["_WrappingCheckpointIO"]


class _WrappingCheckpointIO(CheckpointIO):
    """Every call goes to ``checkpoint_io`` (default ``TorchCheckpointIO``)."""

    def __init__(self, checkpoint_io: CheckpointIO | None = None) -> None:
        self._checkpoint_io = checkpoint_io
        self._base_checkpoint_io_configured = checkpoint_io is not None

    @property
    def checkpoint_io(self) -> CheckpointIO:
        """The wrapped plugin."""
        if self._checkpoint_io is None:
            self._checkpoint_io = TorchCheckpointIO()
            self._base_checkpoint_io_configured = True
        return self._checkpoint_io

    @checkpoint_io.setter
    def checkpoint_io(self, checkpoint_io: CheckpointIO) -> None:
        self._checkpoint_io = checkpoint_io
        self._base_checkpoint_io_configured = True

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike,
                        storage_options: Any | None = None) -> None:
        self.checkpoint_io.save_checkpoint(checkpoint, path, storage_options)

    def load_checkpoint(self, path: str | os.PathLike, map_location: Any | None = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        if map_location is None:
            return load_through(self.checkpoint_io, path, weights_only)
        return self.checkpoint_io.load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path: str | os.PathLike) -> None:
        self.checkpoint_io.remove_checkpoint(path)

    def teardown(self) -> None:
        self.checkpoint_io.teardown()
