"""Checkpoint directories (sharded checkpoints): a directory in which every rank writes its own part of the tensors.

The tensors go through ``torch.distributed.checkpoint`` (DCP), which records each tensor's
global shape and which rank holds which part, so a checkpoint saved by N ranks loads into
M ranks (or into one process, whole). The rest of the checkpoint dict (counters, callback
states, hyperparameters) is written by rank 0 to ``meta.pt`` in the same directory, with
each tensor replaced by a marker naming it; it loads with ``torch.load(weights_only=True)``
(DCP's own way of storing non-tensor values unpickles them, which can run code).

Example::

    save_sharded(checkpoint, "epoch=3.ckpt", is_writer=rank == 0, barrier=dist.barrier)  # on every rank
    checkpoint = load_sharded("epoch=3.ckpt")                                            # anywhere, whole

Only whole directories count, and a save killed at any instant (SIGKILL included) leaves the previous
checkpoint whole, under ``path`` or, for an instant, under ``path.previous``. The protocol:

1. Rank 0 clears what a killed save of ``path`` left: its unfinished directory ``<path>.tmp-<hash>``, and a
   replacement stopped between the two renames of step 4 (see 5).
2. Every rank writes its parts into ``<path>.tmp-<hash>``; DCP's coordinator writes ``.metadata`` once
   all parts are written.
3. Rank 0 then writes ``meta.pt`` (atomically). It is the commit marker: a directory without a whole
   ``meta.pt`` is never read or chosen as a checkpoint (``is_complete_sharded``).
4. Rank 0 moves the directory into place. Where ``path`` exists (``last.ckpt`` saved again), it renames
   ``path`` to ``path.previous``, then the new directory to ``path`` (the commit), then deletes
   ``path.previous``. At every instant a whole checkpoint is at ``path`` or at ``path.previous``.
5. A kill between those renames leaves ``path`` missing and ``path.previous`` whole. A resume finds it
   there (``ModelCheckpoint.find_last_checkpoints``), and the next save of ``path`` first renames it
   back (step 1), dropping the new directory that was never committed.

Deleting a directory (``remove_sharded``) renames it to a temporary name first, so that a kill in the middle
of deleting never leaves a partial directory under its name. Where fsspec cannot rename a directory (object
stores copy, then delete), ``meta.pt`` is copied last and deleted first instead, with the same effect.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from framework.errors import CheckpointError
from framework.io.checkpoint_file import (
    disk_full_or,
    is_complete_checkpoint_file,
    load_checkpoint_file,
    save_checkpoint_file,
    tensor_bytes,
)
from framework.io.dcp_reader import METADATA_FILE, checkpoint_reader, parts_are_whole, pickled_entry
from framework.io.fs import filesystem, is_local, is_temporary, write_atomic
from framework.io.save_points import collecting_writer

META_FILE = "meta.pt"
# Where a checkpoint being replaced waits, whole, for the instant between the two renames of a replacement.
SET_ASIDE_SUFFIX = ".previous"
_MARKER = "__sharded_tensor__"

@dataclass(frozen=True)
class UnreadTensor:
    """A tensor of a sharded checkpoint left unread by ``load_sharded``, because where its parts go is known
    only once the model (or optimizer) it belongs to is at hand: ``read_unread`` reads it into a tensor laid
    out as that one (tensor parallel layouts cannot be told from a shape)."""

    path: str
    key: str
    size: torch.Size
    dtype: torch.dtype
    trusted: bool = False  # read with DCP's own unpickling reader (the user's weights_only=False)


def is_sharded_checkpoint(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory written by ``save_sharded``."""
    fs, inner = filesystem(path)
    return fs.isdir(inner) and fs.exists(f"{inner}/{META_FILE}") and fs.exists(f"{inner}/{METADATA_FILE}")


def is_complete_sharded(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a whole sharded checkpoint: a directory under a finished name (not a temporary)
    with DCP's ``.metadata``, a whole ``meta.pt`` (the commit marker, written last) and every part file as long
    as the index says."""
    path = os.fspath(path).rstrip("/")
    return (not is_temporary(path) and is_sharded_checkpoint(path)
            and is_complete_checkpoint_file(f"{path}/{META_FILE}") and parts_are_whole(path))


def save_sharded(checkpoint: dict[str, Any], path: str | os.PathLike, is_writer: bool,
                 barrier: Callable[[], None]) -> None:
    """Write ``checkpoint`` as the directory ``path``; every rank calls it, with the same structure.

    DTensors are written by the ranks holding their parts; plain tensors once. The directory
    is filled under a temporary name and renamed into place once complete, so a run killed
    while saving leaves any earlier checkpoint at ``path`` whole (see the module for how it is
    replaced, and where it is for the instant between two renames). Inside an
    ``AsyncCheckpointIO.save_point()`` each rank copies its parts to host memory now and writes
    them in the background (``is_writer`` then renames the directory there, once all are written).
    """
    path = os.fspath(path).rstrip("/")
    skeleton, tensors = split_tensors(checkpoint)
    # The same name on every rank without a collective: from the path (a killed save's leftover is removed first).
    temporary = f"{path}.tmp-{hashlib.sha1(path.encode()).hexdigest()[:8]}"
    if is_writer:
        clear_interrupted_save(path, temporary)
    barrier()
    writer = collecting_writer()
    if writer is None:
        _write_directory(skeleton, tensors, temporary, path, None, is_writer)
        barrier()
        return
    staged, group = writer.stage(tensors), writer.process_group()
    writer.add_write(path, lambda: _write_directory(skeleton, staged, temporary, path, group, is_writer))


def _write_directory(skeleton: dict[str, Any], tensors: dict[str, torch.Tensor], temporary: str, path: str,
                     group: Any, is_writer: bool) -> None:
    """Every rank's parts into ``temporary``, then (``is_writer``) ``meta.pt`` and the rename to ``path``. A failed
    write leaves nothing under ``path`` but what was there, and no temporary to fill the disk."""
    import torch.distributed.checkpoint as dcp

    try:
        _write_parts(tensors, temporary, group)  # returns on every rank once all parts are written
        if is_writer:
            _finish(skeleton, temporary, path)
    except (OSError, RuntimeError, dcp.api.CheckpointException) as error:
        if is_writer:  # DCP's save ends on every rank together, failed or not: no rank writes any more
            remove_sharded(temporary)
        cause = _first_failure(error)
        raise disk_full_or(cause, path, tensor_bytes(tensors)) from cause


def _first_failure(error: BaseException) -> BaseException:
    """The first rank's own error inside DCP's report of a failed save, else ``error``."""
    failures = getattr(error, "failures", None)
    return next(iter(failures.values()))[0] if failures else error


def _write_parts(tensors: dict[str, torch.Tensor], temporary: str, group: Any) -> None:
    """Every rank writes its parts of ``tensors`` into the directory ``temporary`` (DCP's ``.metadata`` too)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    on_host = all(t.device.type == "cpu" for t in tensors.values())
    alone = not (dist.is_available() and dist.is_initialized())
    dcp.save(tensors, storage_writer=_writer(temporary, on_host), process_group=group, no_dist=alone)


def _finish(skeleton: dict[str, Any], temporary: str, path: str) -> None:
    """Add the non-tensor part and rename the complete directory ``temporary`` to ``path`` (one rank)."""
    write_atomic(f"{temporary}/{META_FILE}", lambda file: torch.save(skeleton, file))
    move_into_place(temporary, path)


def load_sharded(path: str | os.PathLike, leave_split_unread: bool = False,
                 weights_only: bool | None = None) -> dict[str, Any]:
    """The checkpoint dict in the directory ``path``, every tensor read whole, without unpickling code
    (``framework.io.dcp_reader``; ``weights_only=False`` unpickles whatever it holds, for checkpoints you trust).

    With ``leave_split_unread``, a tensor saved in several parts (a DTensor) is left unread, an
    ``UnreadTensor`` in its place: the strategy loading it reads it with ``read_unread`` into the
    layout of the parameter or optimizer state it goes to, every rank reading only its parts
    (whole reads are for one process: ``framework consolidate``, ``load_from_checkpoint``).
    """
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    path = os.fspath(path).rstrip("/")
    if not is_sharded_checkpoint(path):
        fs, inner = filesystem(path)
        if fs.isfile(inner):
            raise CheckpointError(f"{path!r} is one file already (a strategy that saves whole checkpoints wrote it); "
                                  "it loads as it is.")
        raise CheckpointError(f"{path!r} is not a sharded checkpoint directory: it needs {META_FILE} and "
                              f"{METADATA_FILE}, which a zero2/zero3 run writes" +
                              ("." if fs.exists(inner) else ", and it does not exist."))
    trusted = weights_only is False
    skeleton = load_checkpoint_file(f"{path}/{META_FILE}", map_location="cpu", weights_only=weights_only)
    reader = checkpoint_reader(path, trusted)
    targets: dict[str, Any] = {}
    unread: dict[str, Any] = {}
    for key, saved in reader.read_metadata().state_dict_metadata.items():
        if isinstance(saved, BytesStorageMetadata):
            if not trusted:
                raise pickled_entry(path, key)
            targets[key] = None  # DCP unpickles it into its place
            continue
        size, dtype = saved.size, saved.properties.dtype
        if leave_split_unread and len(saved.chunks) > 1:
            unread[key] = UnreadTensor(path, key, size, dtype, trusted)
        else:
            targets[key] = torch.empty(size, dtype=dtype)
    _read(targets, reader, together=False)
    return join_tensors(skeleton, {**targets, **unread})


def read_unread(targets: dict[UnreadTensor, torch.Tensor]) -> None:
    """Read each ``UnreadTensor`` into its target (a DTensor: this rank reads only its parts). Every rank of the
    process group calls it, with targets for the same checkpoint."""
    by_path: dict[tuple[str, bool], dict[str, torch.Tensor]] = {}
    for unread, target in targets.items():
        by_path.setdefault((unread.path, unread.trusted), {})[unread.key] = target
    for (path, trusted), tensors in sorted(by_path.items()):
        _read(tensors, checkpoint_reader(path, trusted), together=True)


def _read(targets: dict[str, torch.Tensor], reader: Any, together: bool) -> None:
    """DCP's load of ``targets``: ``together`` with the process group (where there is one), else on this rank."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    together = together and dist.is_available() and dist.is_initialized()
    with warnings.catch_warnings():  # DCP warns that no process group means one process: that is what is asked
        warnings.filterwarnings("ignore", message=".*assuming the intent is to load in a single process")
        try:
            dcp.load(targets, storage_reader=reader, no_dist=not together)
        except dcp.api.CheckpointException as wrapped:  # a rank's refusal (dcp_reader), inside DCP's report
            refusals = [error for error, _ in wrapped.failures.values() if isinstance(error, CheckpointError)]
            if refusals:
                raise refusals[0] from None
            first = next(iter(wrapped.failures.values()))[0]
            raise CheckpointError(f"Checkpoint directory {os.fspath(reader.path)!r} is damaged: a part of it could "
                                  f"not be read ({type(first).__name__}: {str(first)[:200]}).") from first


def consolidate(checkpoint_dir: str | os.PathLike, output_file: str | os.PathLike) -> None:
    """Write the sharded checkpoint ``checkpoint_dir`` as one file, readable on one process without
    torch.distributed (``torch.load(weights_only=True)``, ``Module.load_from_checkpoint``, a resume).

    Example::

        consolidate("checkpoints/last.ckpt", "last-full.ckpt")
    """
    save_checkpoint_file(load_sharded(checkpoint_dir), output_file)


# -- the checkpoint dict without its tensors, and back ---
def split_tensors(checkpoint: dict[str, Any]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``checkpoint`` with each tensor replaced by a marker, and the tensors by the markers' names."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(value: Any, names: tuple[str, ...]) -> Any:
        if isinstance(value, torch.Tensor):
            key = "/".join(names)
            if key in tensors:
                raise CheckpointError(f"Two entries of the checkpoint are both named {key!r} once their keys are "
                                      "made strings; rename one of them.")
            tensors[key] = value
            return {_MARKER: key}
        if isinstance(value, dict):
            return {name: walk(entry, (*names, str(name))) for name, entry in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(walk(entry, (*names, str(index))) for index, entry in enumerate(value))
        return value

    return walk(checkpoint, ()), tensors


def join_tensors(skeleton: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """The inverse of ``split_tensors``: every marker in ``skeleton`` replaced by its tensor."""
    if isinstance(skeleton, dict):
        if len(skeleton) == 1 and _MARKER in skeleton:
            return tensors[skeleton[_MARKER]]
        return {name: join_tensors(entry, tensors) for name, entry in skeleton.items()}
    if isinstance(skeleton, (list, tuple)):
        return type(skeleton)(join_tensors(entry, tensors) for entry in skeleton)
    return skeleton


# -- storage ---
def clear_interrupted_save(path: str, temporary: str, is_complete: Callable[[str], bool] | None = None) -> None:
    """Undo what a killed save of ``path`` left (step 1 of the module's protocol): its unfinished directory, and
    a replacement stopped between its renames, whose previous checkpoint goes back to ``path``. ``is_complete``
    judges the directory form written (default: a sharded checkpoint's)."""
    fs, inner = filesystem(path)
    _, inner_temporary = filesystem(temporary)
    if fs.exists(inner_temporary):
        fs.rm(inner_temporary, recursive=True)
    previous = inner + SET_ASIDE_SUFFIX
    if not _exists(fs, previous):
        return
    whole = is_complete or is_complete_sharded
    if whole(path) or is_complete_checkpoint_file(path):  # only the deletion of step 4 was missed
        _remove(fs, previous)
        return
    if _exists(fs, inner):  # elsewhere than on this disk, a copy into place that was cut short
        _remove(fs, inner)
    _rename(fs, previous, inner)


def move_into_place(temporary: str, path: str) -> None:
    """Rename the finished directory ``temporary`` to ``path``, replacing what is there without a moment
    where no whole checkpoint is at ``path`` or ``path.previous`` (step 4 of the module's protocol)."""
    fs, inner = filesystem(path)
    _, inner_temporary = filesystem(temporary)
    if not _exists(fs, inner):
        _rename(fs, inner_temporary, inner)
        return
    previous = inner + SET_ASIDE_SUFFIX
    _rename(fs, inner, previous)
    _rename(fs, inner_temporary, inner)  # the commit
    _remove(fs, previous)


def remove_sharded(path: str | os.PathLike) -> None:
    """Delete the checkpoint at ``path`` (a directory; a file or link too) if it is there, never leaving a
    partial directory under its name: one killed midway leaves a temporary, which ``ModelCheckpoint`` clears."""
    fs, inner = filesystem(path)
    if _exists(fs, inner.rstrip("/")):
        _remove(fs, inner.rstrip("/"))


def _exists(fs: Any, inner: str) -> bool:
    return os.path.lexists(inner) if is_local(fs) else fs.exists(inner)  # a dangling link is there, in the way


def _rename(fs: Any, source: str, target: str) -> None:
    """Move ``source`` to ``target``, which does not exist; here a rename, at once."""
    if is_local(fs):
        os.rename(source, target)  # not fs.mv: shutil.move would move a directory into an existing one
        return
    if not fs.isdir(source):
        fs.mv(source, target)
        return
    # fsspec moves a directory by copying, then deleting: the commit marker is copied last and deleted first,
    # so neither side passes for complete while partial.
    meta = f"{source}/{META_FILE}"
    for file in fs.find(source):
        if file != meta:
            fs.copy(file, target + file[len(source):])
    if fs.exists(meta):
        fs.copy(meta, f"{target}/{META_FILE}")
    _remove(fs, source)


def _remove(fs: Any, inner: str) -> None:
    if is_local(fs):
        if os.path.islink(inner) or not os.path.isdir(inner):
            os.remove(inner)
            return
        doomed = f"{inner}.tmp-{uuid.uuid4().hex[:8]}"  # one rename: a kill while deleting leaves a temporary
        os.rename(inner, doomed)
        shutil.rmtree(doomed)
        return
    if fs.isdir(inner):
        if fs.exists(f"{inner}/{META_FILE}"):
            fs.rm(f"{inner}/{META_FILE}")  # no longer complete, before any part goes
        fs.rm(inner, recursive=True)
    else:
        fs.rm(inner)


def _writer(path: str, on_host: bool) -> Any:
    # Wherever CUDA is available, DCP copies tensors to the host ahead of writing them on a CUDA stream, and so
    # initialises CUDA in a CPU run (which fails in a forked rank); with every tensor on the host it copies none.
    options = {"per_thread_copy_ahead": 0} if on_host else {}
    fs, inner = filesystem(path)
    if is_local(fs):
        from torch.distributed.checkpoint import FileSystemWriter

        return FileSystemWriter(inner, **options)
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

    return FsspecWriter(path, **options)
