"""Lightning's ``fabric.utilities.cloud_io``: files on any fsspec filesystem, read safely, written atomically.

Example::

    fs = get_filesystem("s3://bucket/run")        # fsspec's filesystem for the path
    checkpoint = _load("s3://bucket/run/last.ckpt", map_location="cpu")
"""

from __future__ import annotations

import os
from typing import Any

from framework.io.checkpoint_file import load_checkpoint_file, save_checkpoint_file
from framework.io.fs import filesystem, is_local

__all__ = ["_atomic_save", "_is_dir", "_is_local_file_protocol", "_load", "get_filesystem"]


def get_filesystem(path: str | os.PathLike, **kwargs: Any) -> Any:
    """fsspec's filesystem for ``path`` (``kwargs`` are its storage options)."""
    return filesystem(path, kwargs or None)[0]


def _load(path_or_url: Any, map_location: Any = None, weights_only: bool | None = None) -> Any:
    """What ``torch.save`` wrote to ``path_or_url`` (a path on any filesystem, an http(s) URL, or an open file).

    Unlike ``torch.load`` before 2.6, ``weights_only=None`` unpickles tensors and plain data only: a file that
    names other Python objects raises ``UnsafeCheckpointError`` unless you pass ``weights_only=False``.
    """
    import torch

    safe = weights_only is not False
    if not isinstance(path_or_url, (str, os.PathLike)):
        return torch.load(path_or_url, map_location=map_location, weights_only=safe)
    if str(path_or_url).startswith(("http://", "https://")):
        return torch.hub.load_state_dict_from_url(str(path_or_url), map_location=map_location, weights_only=safe)
    return load_checkpoint_file(path_or_url, map_location=map_location, weights_only=weights_only)


def _atomic_save(checkpoint: dict[str, Any], filepath: str | os.PathLike) -> None:
    """Write ``checkpoint`` to ``filepath`` so that a reader sees the old file or the whole new one, never part."""
    save_checkpoint_file(checkpoint, filepath)


def _is_dir(fs: Any, path: str | os.PathLike, strict: bool = False) -> bool:
    """Whether ``path`` is a directory on ``fs``."""
    return fs.isdir(os.fspath(path))


def _is_local_file_protocol(path: str | os.PathLike) -> bool:
    """Whether ``path`` is on the local filesystem."""
    return is_local(filesystem(path)[0])
