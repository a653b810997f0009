"""A checkpoint at a path, whichever form it has: one file, or a directory of parts (a sharded checkpoint).

The one place that tells the two forms apart when reading. Which form to write is the strategy's choice
(``FSDPStrategy(state_dict_type=...)``); ``save_checkpoint`` writes the one-file form.

Example::

    save_checkpoint(checkpoint, "last.ckpt")
    checkpoint = load_checkpoint("last.ckpt")      # a file or a directory a zero2/zero3 run wrote
"""

from __future__ import annotations

import os
from typing import Any

from framework.errors import CheckpointError
from framework.io.checkpoint_dir import is_sharded_checkpoint, load_sharded
from framework.io.checkpoint_file import FORMAT_VERSION, load_checkpoint_file, save_checkpoint_file
from framework.io.fs import filesystem

__all__ = ["FORMAT_VERSION", "load_checkpoint", "save_checkpoint"]


def save_checkpoint(checkpoint: dict[str, Any], path: str | os.PathLike,
                    storage_options: dict[str, Any] | None = None) -> None:
    """Write ``checkpoint`` to the file ``path`` atomically (any fsspec path; ``storage_options`` go to its
    filesystem). Inside an ``AsyncCheckpointIO.save_point()`` it is copied to host memory now and written in
    the background."""
    save_checkpoint_file(checkpoint, path, storage_options)


def load_checkpoint(path: str | os.PathLike, map_location: Any = None, weights_only: bool | None = None,
                    leave_split_unread: bool = False) -> dict[str, Any]:
    """Read the checkpoint at ``path`` (written by ``save_checkpoint``, by a zero2/zero3 run, or by Lightning)
    without unpickling code.

    ``weights_only=False`` unpickles whatever a file holds, which can run code: only for files you trust
    (None and True load tensors and plain data only). A sharded checkpoint (a directory) is read whole, on
    this process alone, unless ``leave_split_unread``: then its split tensors are left for the strategy to
    read in its own layout (``checkpoint_dir.load_sharded``).
    """
    fs, inner = filesystem(path)
    if fs.isdir(inner):
        if is_sharded_checkpoint(path):
            return load_sharded(path, leave_split_unread=leave_split_unread)
        raise CheckpointError(f"Checkpoint {os.fspath(path)!r} is a directory, but not a sharded checkpoint.")
    return load_checkpoint_file(path, map_location, weights_only)
