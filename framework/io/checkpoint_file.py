"""The checkpoint file: one dict of tensors, numbers, strings, lists and dicts.

Nothing pickled beyond that, so every checkpoint loads with ``torch.load(weights_only=True)``. The bottom of
the checkpoint I/O: ``checkpoint_dir`` (directories of parts) builds on it, and ``checkpoint`` chooses between
the two when reading a path.
"""

from __future__ import annotations

import os
import pickle
import struct
from typing import Any

import torch

from framework.errors import CheckpointError
from framework.io.async_writer import collecting_writer
from framework.io.fs import filesystem, is_temporary, write_atomic
from framework.version import __version__

# The layout of the checkpoint dict; a reader refuses files of a newer layout instead of half-loading them.
FORMAT_VERSION = 1
# torch.save writes a zip archive; files from torch.save(_use_new_zipfile_serialization=False) are a bare pickle.
_CHECKPOINT_STARTS = (b"PK\x03\x04", b"\x80")
# A zip archive ends with its end-of-central-directory record: 22 bytes and a comment of at most 65535.
_ZIP_END = b"PK\x05\x06"
_ZIP_END_SIZE = 22
_ZIP_END_MAX_SEARCH = _ZIP_END_SIZE + 0xFFFF


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


def is_complete_checkpoint_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a whole checkpoint file: named as a finished file (not a ``write_atomic``
    temporary) and, for torch.save's zip archive, ending with the archive's end record.

    Our writes only ever show whole files under a final name (``write_atomic``); the end record is checked
    as well because a file may come from elsewhere (a copy that was killed, a disk that lost the last
    blocks of an unsynced file): a truncated archive lacks it. A file in torch's legacy (non-zip) format
    has no such record and counts when it is not empty. Reads at most 64 KiB; a link counts as its target.
    """
    if is_temporary(path):
        return False
    fs, inner = filesystem(path)
    try:
        with fs.open(inner, "rb") as file:
            start = file.read(4)
            if start[:1] == b"\x80":
                return True
            if start != _CHECKPOINT_STARTS[0]:
                return False
            size = file.seek(0, os.SEEK_END)
            search = min(size, _ZIP_END_MAX_SEARCH)
            file.seek(size - search)
            tail = file.read(search)
    except (OSError, ValueError):  # missing, a directory, unreadable
        return False
    end = tail.rfind(_ZIP_END)
    if end < 0 or end + _ZIP_END_SIZE > len(tail):
        return False
    (comment_length,) = struct.unpack("<H", tail[end + 20:end + 22])
    return end + _ZIP_END_SIZE + comment_length == len(tail)


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
        except (RuntimeError, EOFError, KeyError, ValueError, OSError) as error:  # torch.load on damaged bytes;
            # OSError: its zip reader seeks past the end of a cut local file
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
