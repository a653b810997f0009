"""The checkpoint file: one dict of tensors, numbers, strings, lists and dicts.

Nothing pickled beyond that, so every checkpoint loads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import io
import os
import pickle
from typing import Any

import torch

from framework.io.fs import read_bytes, write_bytes_atomic


def save_checkpoint(checkpoint: dict[str, Any], path: str | os.PathLike,
                    storage_options: dict[str, Any] | None = None) -> None:
    """Write ``checkpoint`` to ``path`` atomically (any fsspec path; ``storage_options`` go to its filesystem)."""
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    write_bytes_atomic(path, buffer.getvalue(), storage_options)


def load_checkpoint(
    path: str | os.PathLike, map_location: Any = None, weights_only: bool | None = None
) -> dict[str, Any]:
    """Read a checkpoint written by ``save_checkpoint`` (or by Lightning) without unpickling code.

    ``weights_only=False`` unpickles whatever the file holds, which can run code: only for
    files you trust (None and True load tensors and plain data only).
    """
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"Checkpoint {os.fspath(path)!r} does not exist.") from None
    safe = weights_only is not False
    try:
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=safe)
    except pickle.UnpicklingError as error:
        if not safe:
            raise
        raise pickle.UnpicklingError(
            f"Checkpoint {os.fspath(path)!r} holds pickled Python objects, not only tensors and plain data, so it "
            "was not loaded: unpickling a file can run any code it carries. If you trust where the file came from, "
            f"load it with weights_only=False. ({error})"
        ) from None
