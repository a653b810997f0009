"""The checkpoint file: one dict of tensors, numbers, strings, lists and dicts.

Nothing pickled beyond that, so every checkpoint loads with ``torch.load(weights_only=True)``. The bottom of
the checkpoint I/O: ``checkpoint_dir`` (directories of parts) builds on it, and ``checkpoint`` chooses between
the two when reading a path.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import torch

from framework.errors import CheckpointError
from framework.io.async_writer import collecting_writer
from framework.io.fs import filesystem, write_atomic
from framework.version import __version__

# The layout of the checkpoint dict; a reader refuses files of a newer layout instead of half-loading them.
FORMAT_VERSION = 1
# torch.save writes a zip archive; files from torch.save(_use_new_zipfile_serialization=False) are a bare pickle.
_CHECKPOINT_STARTS = (b"PK\x03\x04", b"\x80")


def save_checkpoint_file(checkpoint: dict[str, Any], path: str | os.PathLike,
                         storage_options: dict[str, Any] | None = None) -> None:
    """Write ``checkpoint`` to ``path`` atomically (any fsspec path; ``storage_options`` go to its filesystem).

    Inside an ``AsyncCheckpointIO.save_point()`` the state is copied to host memory now and
    written in the background.
    """
    writer = collecting_writer()
    if writer is not None:
        staged = writer.stage(checkpoint)
        writer.add_write(os.fspath(path), lambda: write_atomic(path, lambda file: torch.save(staged, file),
                                                               storage_options))
        return
    write_atomic(path, lambda file: torch.save(checkpoint, file), storage_options)


def load_checkpoint_file(
    path: str | os.PathLike, map_location: Any = None, weights_only: bool | None = None
) -> dict[str, Any]:
    """Read the checkpoint file ``path`` (written by ``save_checkpoint_file``, or by Lightning) without unpickling
    code.

    ``weights_only=False`` unpickles whatever the file holds, which can run code: only for
    files you trust (None and True load tensors and plain data only).
    """
    fs, inner = filesystem(path)
    try:
        file = fs.open(inner, "rb")
    except FileNotFoundError:
        raise FileNotFoundError(f"Checkpoint {os.fspath(path)!r} does not exist.") from None
    safe = weights_only is not False
    with file:  # torch.load reads from the file as it goes: no second copy of a large checkpoint in memory
        if not file.read(4).startswith(_CHECKPOINT_STARTS):
            raise _damaged(path, fs.size(inner), "it is neither a zip archive nor a pickle")
        file.seek(0)
        try:
            checkpoint = torch.load(file, map_location=map_location, weights_only=safe)
        except pickle.UnpicklingError as error:
            if not safe:
                raise
            raise pickle.UnpicklingError(
                f"Checkpoint {os.fspath(path)!r} holds pickled Python objects, not only tensors and plain data, so it "
                "was not loaded: unpickling a file can run any code it carries. If you trust where the file came "
                f"from, load it with weights_only=False. ({error})"
            ) from None
        except (RuntimeError, EOFError, KeyError, ValueError) as error:  # what torch.load raises on damaged bytes
            raise _damaged(path, fs.size(inner), f"{type(error).__name__}: {str(error)[:200]}") from None
    _check_format(checkpoint, path)
    return checkpoint


def _damaged(path: str | os.PathLike, size: int, why: str) -> CheckpointError:
    return CheckpointError(
        f"Checkpoint {os.fspath(path)!r} ({size} bytes) is truncated or corrupted and was not loaded ({why}). "
        "Resume from another checkpoint (last.ckpt or an earlier file of the same run)."
    )


def _check_format(checkpoint: Any, path: str | os.PathLike) -> None:
    """Refuse a checkpoint in a layout newer than this framework reads, saying which version wrote it."""
    version = checkpoint.get("format_version", FORMAT_VERSION) if isinstance(checkpoint, dict) else FORMAT_VERSION
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise CheckpointError(
            f"Checkpoint {os.fspath(path)!r} is in checkpoint format {version}, written by framework "
            f"{checkpoint.get('framework_version', '?')}; framework {__version__} reads format {FORMAT_VERSION} and "
            "older. Upgrade the framework (pip install -U) to load it."
        )
