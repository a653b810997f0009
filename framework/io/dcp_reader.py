"""Reading a checkpoint directory's parts without running code.

``torch.distributed.checkpoint`` (DCP) keeps a directory's index in ``.metadata``, written with pickle, and its
own reader loads it with ``pickle.load``: a ``.metadata`` whose bytes name ``os.system`` runs it. Here
``.metadata`` is read with an unpickler that admits only what DCP's index holds (its metadata dataclasses and
enums, ``torch.Size``, dtypes and layouts, paths); any other name refuses the load with an
``UnsafeCheckpointError`` naming the file and what it named. The tensors of the part files (``__0_0.distcp``
...) are read by DCP with ``torch.load(weights_only=True)``; a part file that holds anything else is refused the
same way, naming it. An entry DCP stores as pickled bytes (which it reads with ``torch.load(weights_only=False)``)
is refused too: our checkpoints never hold one (``meta.pt`` carries everything that is not a tensor).

``trusted=True`` (a user's ``weights_only=False``) gives DCP's own reader, which unpickles anything.

Example::

    reader = checkpoint_reader("epoch=3.ckpt", trusted=False)
    metadata = reader.read_metadata()     # refused with UnsafeCheckpointError if .metadata names other code
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import os
import pickle
from typing import IO, Any

import torch

from framework.errors import CheckpointError, UnsafeCheckpointError
from framework.io.checkpoint_file import unsafe_file
from framework.io.fs import filesystem, is_local

METADATA_FILE = ".metadata"
_DCP_METADATA = "torch.distributed.checkpoint.metadata"
# What DCP's .metadata legitimately names besides its own dataclasses and enums.
_ALSO_ADMITTED = frozenset({
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),  # how a torch.layout pickles: looks the name up among torch's layouts
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("pathlib", "PosixPath"), ("pathlib", "WindowsPath"), ("pathlib", "PurePosixPath"),
    ("pathlib", "PureWindowsPath"), ("pathlib", "Path"),
    ("collections", "OrderedDict"),
})


class _MetadataUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the names DCP's index holds, and refuses every other."""

    def __init__(self, file: IO[bytes], where: str) -> None:
        super().__init__(file)
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        if _admitted(module, name):
            return super().find_class(module, name)
        raise UnsafeCheckpointError(
            f"Checkpoint file {self.where!r} names {module}.{name}, which a checkpoint's index never holds; it "
            "was not loaded, since unpickling it would run that code. If you trust where the checkpoint came "
            "from, load it with weights_only=False."
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeCheckpointError(f"Checkpoint file {self.where!r} holds a persistent reference, which a "
                                    "checkpoint's index never holds; it was not loaded.")


def _admitted(module: str, name: str) -> bool:
    if (module, name) in _ALSO_ADMITTED:
        return True
    if module == "torch":
        return isinstance(getattr(torch, name, None), torch.dtype)
    if module == _DCP_METADATA and not name.startswith("__"):
        found = getattr(importlib.import_module(module), name, None)
        return isinstance(found, type) and (dataclasses.is_dataclass(found) or issubclass(found, enum.Enum)) \
            and found.__module__ == module
    return False


def load_metadata(file: IO[bytes], where: str) -> Any:
    """DCP's ``Metadata`` from the open ``.metadata`` file ``file`` (``where`` names it in errors), read with the
    restricted unpickler."""
    from torch.distributed.checkpoint.metadata import Metadata

    try:
        metadata = _MetadataUnpickler(file, where).load()
    except UnsafeCheckpointError:
        raise
    except Exception as error:  # damaged bytes: pickle's errors, EOF, a bad opcode's argument
        raise CheckpointError(f"Checkpoint file {where!r} is truncated or corrupted and was not loaded "
                              f"({type(error).__name__}: {str(error)[:200]}).") from None
    if not isinstance(metadata, Metadata):
        raise UnsafeCheckpointError(f"Checkpoint file {where!r} holds a {type(metadata).__name__}, not DCP's "
                                    "index of a checkpoint directory; it was not loaded.")
    return metadata


def parts_are_whole(path: str) -> bool:
    """Whether every part file of the checkpoint directory ``path`` is as long as ``.metadata`` says (a copy cut
    off, or a disk that filled, leaves one shorter)."""
    fs, inner = filesystem(path)
    try:
        with fs.open(f"{inner}/{METADATA_FILE}", "rb") as file:
            metadata = load_metadata(file, f"{path}/{METADATA_FILE}")
    except UnsafeCheckpointError:
        return True  # whole, and refused when it is loaded, naming what it holds
    except (CheckpointError, OSError):
        return False
    needed: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    try:
        return all(fs.size(f"{inner}/{name}") >= size for name, size in needed.items())
    except OSError:  # a part file missing
        return False


def checkpoint_reader(path: str, trusted: bool) -> Any:
    """A DCP storage reader for the directory ``path`` (a local path or an fsspec URL): the restricted one, or
    DCP's own where ``trusted``."""
    fs, inner = filesystem(path)
    local = is_local(fs)
    if local:
        from torch.distributed.checkpoint import FileSystemReader as base
    else:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader as base
    reader_class = base if trusted else _restricted(base)
    return reader_class(inner if local else path)


@functools.cache
def _restricted(base: type) -> type:
    """``base`` (a DCP file reader) reading ``.metadata`` with the restricted unpickler and refusing pickled
    entries and part files that hold more than tensors."""

    class RestrictedReader(base):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            from torch.distributed.checkpoint.metadata import StorageMeta

            rank = kwargs.get("rank")
            path = self._get_metadata_path(rank) if hasattr(self, "_get_metadata_path") else \
                self.fs.concat_path(self.path, METADATA_FILE)
            with self.fs.create_stream(path, "rb") as file:
                metadata = load_metadata(file, os.fspath(path))
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

        def read_data(self, plan: Any, planner: Any) -> Any:
            from torch.distributed.checkpoint.planner import LoadItemType

            by_file: dict[str, list[Any]] = {}
            for item in plan.items:
                if item.type == LoadItemType.BYTE_IO:
                    raise pickled_entry(os.fspath(self.path), item.dest_index.fqn)
                by_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
            for relative_path, items in by_file.items():
                try:
                    super().read_data(dataclasses.replace(plan, items=items), planner).wait()
                except pickle.UnpicklingError as error:
                    raise unsafe_file(os.path.join(os.fspath(self.path), relative_path), error) from None
            return _done()

    RestrictedReader.__qualname__ = RestrictedReader.__name__ = f"Restricted{base.__name__}"
    return RestrictedReader


def pickled_entry(directory: str, key: str) -> UnsafeCheckpointError:
    """The error for an entry ``key`` that DCP stored as pickled bytes in the checkpoint directory ``directory``."""
    return UnsafeCheckpointError(
        f"Checkpoint directory {directory!r} holds {key!r} as pickled Python bytes, which this framework never "
        "writes and which unpickling can turn into any code; it was not loaded. If you trust where the "
        "checkpoint came from, load it with weights_only=False."
    )


def _done() -> Any:
    from torch.futures import Future

    future: Future = Future()
    future.set_result(None)
    return future
