"""Paths through fsspec: any installed protocol (``file://``, ``memory://``, ``s3://`` ...)."""

from __future__ import annotations

import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable
from typing import IO, Any


def filesystem(path: str | os.PathLike, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec filesystem for ``path`` (made with ``storage_options``) and the path as it spells it."""
    from fsspec.core import url_to_fs

    return url_to_fs(os.fspath(path), **(storage_options or {}))


def exists(path: str | os.PathLike) -> bool:
    """Whether ``path`` exists (any fsspec path)."""
    fs, inner = filesystem(path)
    return fs.exists(inner)


def is_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory (any fsspec path)."""
    fs, inner = filesystem(path)
    return fs.isdir(inner)


def names_in(path: str | os.PathLike) -> list[str]:
    """The names of the entries of directory ``path`` (empty when it does not exist)."""
    fs, inner = filesystem(path)
    if not fs.isdir(inner):
        return []
    return sorted(os.path.basename(entry.rstrip("/")) for entry in fs.ls(inner, detail=False))


def modified_time(path: str | os.PathLike) -> float:
    """When the file at ``path`` was last written (seconds since the epoch; 0 where the filesystem cannot say)."""
    fs, inner = filesystem(path)
    try:
        return fs.modified(inner).timestamp()
    except (NotImplementedError, AttributeError):
        return 0.0


def make_dirs(path: str | os.PathLike) -> None:
    """Create directory ``path`` and its parents (any fsspec path); nothing if it exists."""
    fs, inner = filesystem(path)
    fs.makedirs(inner, exist_ok=True)


def remove(path: str | os.PathLike) -> None:
    """Delete the file (or directory: a sharded checkpoint) at ``path`` if it exists (any fsspec path)."""
    fs, inner = filesystem(path)
    if is_local(fs) and os.path.islink(inner):
        os.remove(inner)  # the link, not what it points at
    elif fs.exists(inner):
        fs.rm(inner, recursive=fs.isdir(inner))


def append_text(path: str | os.PathLike, text: str) -> None:
    """Add ``text`` at the end of the file at ``path``, creating it if needed.

    Local files are appended to; other filesystems (where appending is not always possible)
    get the whole file rewritten atomically.
    """
    fs, inner = filesystem(path)
    if is_local(fs):
        fs.makedirs(os.path.dirname(inner) or ".", exist_ok=True)
        with open(inner, "a", encoding="utf-8", newline="") as handle:
            handle.write(text)
        return
    old = read_bytes(path) if fs.exists(inner) else b""
    write_bytes_atomic(path, old + text.encode("utf-8"))


def read_bytes(path: str | os.PathLike) -> bytes:
    """The contents of the file at ``path`` (any fsspec path)."""
    fs, inner = filesystem(path)
    with fs.open(inner, "rb") as handle:
        return handle.read()


def write_bytes_atomic(path: str | os.PathLike, data: bytes, storage_options: dict[str, Any] | None = None) -> None:
    """Write ``data`` to ``path`` so that a reader sees either the old file or the new one."""
    write_atomic(path, lambda handle: handle.write(data), storage_options)


def write_atomic(path: str | os.PathLike, write: Callable[[IO[bytes]], Any],
                 storage_options: dict[str, Any] | None = None) -> None:
    """Call ``write`` with a binary file that becomes ``path`` only once ``write`` has returned.

    The bytes go to a temporary name beside the target and are renamed over it when complete,
    so a crash or a kill mid-write never leaves a truncated file at ``path`` (only the
    temporary, which ``leftover_temporaries`` finds).

    Example::

        write_atomic("memory://run/weights.pt", lambda file: torch.save(state, file))
    """
    fs, inner = filesystem(path, storage_options)
    parent = os.path.dirname(inner.rstrip("/"))
    if parent:
        fs.makedirs(parent, exist_ok=True)
    temporary = f"{inner}{_TEMPORARY_MARK}{uuid.uuid4().hex[:8]}"
    try:
        with fs.open(temporary, "wb") as handle:
            write(handle)
        if is_local(fs):
            _replace_local(temporary, inner)
        else:
            fs.mv(temporary, inner)
    finally:
        if fs.exists(temporary):
            fs.rm(temporary)


# write_atomic's temporaries are "<target>.tmp-<8 hex digits>"
_TEMPORARY_MARK = ".tmp-"
_TEMPORARY = re.compile(r".+\.tmp-[0-9a-f]{8}$")


def is_temporary(path: str | os.PathLike) -> bool:
    """Whether ``path`` is named as a ``write_atomic`` temporary (or a sharded checkpoint's: they share the
    form), which is never a finished file whatever its bytes: it becomes one only by its rename."""
    return bool(_TEMPORARY.match(os.path.basename(os.fspath(path).rstrip("/"))))


def leftover_temporaries(directory: str | os.PathLike, suffix: str = "") -> list[str]:
    """The paths of unfinished ``write_atomic`` files in ``directory`` (a killed process leaves them),
    only those for targets ending with ``suffix``."""
    return [os.path.join(os.fspath(directory), name) for name in names_in(directory)
            if _TEMPORARY.match(name) and name.rsplit(_TEMPORARY_MARK, 1)[0].endswith(suffix)]


# A replaced file at least this large is freed in the background (a thread per save is nothing beside it).
_FREE_IN_BACKGROUND_BYTES = 64 * 2**20


def _replace_local(source: str, target: str) -> None:
    """``os.replace(source, target)``, leaving the freeing of a large replaced file to a background thread.

    Freeing a gigabyte-sized file's pages or blocks takes the kernel about as long as writing it
    (measured on tmpfs and ext4), and os.replace would wait for it. Holding the old file open
    across the rename moves that work to the moment it is closed, off the training loop.
    """
    replaced = None
    if os.name == "posix":  # elsewhere an open file cannot be replaced
        try:
            replaced = open(target, "rb")  # noqa: SIM115 - closed below or by the thread
        except OSError:  # no such file yet, a directory, not readable
            replaced = None
    try:
        os.replace(source, target)
    finally:
        if replaced is not None:
            if os.fstat(replaced.fileno()).st_size >= _FREE_IN_BACKGROUND_BYTES:
                threading.Thread(target=replaced.close, name="framework-free-replaced-file", daemon=True).start()
            else:
                replaced.close()


def free_bytes(path: str | os.PathLike) -> int | None:
    """The bytes free for writing on the local filesystem that holds ``path`` (or its nearest existing parent);
    None for other filesystems, where that cannot be known."""
    fs, inner = filesystem(path)
    if not is_local(fs):
        return None
    directory = os.path.abspath(inner)
    while not os.path.isdir(directory) and os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return None


def is_local(fs: Any) -> bool:
    """Whether the fsspec filesystem ``fs`` is this machine's own disk."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")
