"""The checkpoint file: one dict of tensors, numbers, strings, lists and dicts.

Nothing pickled beyond that, so every checkpoint loads with ``torch.load(weights_only=True)``. The bottom of
the checkpoint I/O: ``checkpoint_dir`` (directories of parts) builds on it, and ``checkpoint`` chooses between
the two when reading a path.
"""

from __future__ import annotations

import os
import pickle
import re
import struct
from typing import Any

import torch

from framework.errors import CheckpointError, UnsafeCheckpointError
from framework.io.fs import filesystem, free_bytes, is_temporary, write_atomic
from framework.io.save_points import collecting_writer
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
        writer.add_write(os.fspath(path), lambda: _write(staged, path, storage_options))
        return
    _write(checkpoint, path, storage_options)


def _write(checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: dict[str, Any] | None) -> None:
    try:
        write_atomic(path, lambda file: torch.save(checkpoint, file), storage_options)
    except (OSError, RuntimeError) as error:  # a full disk shows in torch.save as "unexpected pos"
        raise disk_full_or(error, path, tensor_bytes(checkpoint)) from error


def tensor_bytes(value: Any) -> int:
    """The bytes of the tensors in the nested ``value`` (each storage counted once; a DTensor: this rank's part):
    about what saving it writes."""
    seen: dict[tuple, int] = {}

    def visit(item: Any) -> None:
        if isinstance(item, torch.Tensor):
            local = getattr(item, "_local_tensor", item)
            storage = local.untyped_storage()
            seen[(local.device, storage.data_ptr())] = storage.nbytes()
        elif isinstance(item, dict):
            for entry in item.values():
                visit(entry)
        elif isinstance(item, (list, tuple)):
            for entry in item:
                visit(entry)

    visit(value)
    return sum(seen.values())


def disk_full_or(error: BaseException, path: str | os.PathLike, needed: int) -> BaseException:
    """A ``CheckpointError`` naming ``path``, the bytes its save needed and the space left, where ``error`` came
    from a full disk (ENOSPC, or less space left than the save needs); else ``error`` itself."""
    import errno

    free = free_bytes(path)
    full = isinstance(error, OSError) and error.errno == errno.ENOSPC
    if not full and (free is None or free >= needed):
        return error
    left = f"and {_megabytes(free)} ({free} bytes) are left" if free is not None else "more than is left"
    return CheckpointError(
        f"Saving the checkpoint {os.fspath(path)!r} failed: the disk is full. It needs about {_megabytes(needed)} "
        f"({needed} bytes) {left} where it goes. Nothing was written under that name and the earlier checkpoints "
        "are kept; free some space (or save elsewhere: ModelCheckpoint(dirpath=...)) and start again. "
        f"({type(error).__name__}: {str(error)[:120]})"
    )


def _megabytes(count: int | None) -> str:
    return "?" if count is None else f"{count / 2**20:.1f} MiB"


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
            raise unsafe_file(path, error) from None
        except (RuntimeError, EOFError, KeyError, ValueError, OSError) as error:  # torch.load on damaged bytes;
            # OSError: its zip reader seeks past the end of a cut local file
            raise _damaged(path, fs.size(inner), f"{type(error).__name__}: {str(error)[:200]}") from None
    _check_format(checkpoint, path)
    return checkpoint


def unsafe_file(path: str | os.PathLike, error: BaseException) -> UnsafeCheckpointError:
    """The error for the file ``path``, which torch's weights-only unpickler refused with ``error``."""
    return UnsafeCheckpointError(
        f"Checkpoint {os.fspath(path)!r} holds pickled Python objects, not only tensors and plain data "
        f"({what_pickle_named(error)}), so it was not loaded: unpickling a file can run any code it carries. If you "
        "trust where the file came from, load it with weights_only=False."
    )


def what_pickle_named(error: BaseException) -> str:
    """What torch's weights-only unpickler refused, from its message ("GLOBAL os.system was not an allowed
    global ...": "it names os.system")."""
    found = re.search(r"GLOBAL ([\w.]+)", str(error))
    return f"it names {found.group(1)}" if found else str(error).strip().splitlines()[0][:200]


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
