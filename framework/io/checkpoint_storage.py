"""A checkpoint at a path, whichever form it has: one file, or a directory of parts (a sharded checkpoint).

The one place that tells the two forms apart when reading. Which form to write is the strategy's choice
(``FSDPStrategy(state_dict_type=...)``); ``save_checkpoint`` writes the one-file form.

Example::

    save_checkpoint(checkpoint, "last.ckpt")
    checkpoint = load_checkpoint("last.ckpt")      # a file or a directory a zero2/zero3 run wrote

Only complete checkpoints count: ``is_complete_checkpoint`` says whether one is whole, and
``newest_complete_checkpoint`` picks the one a resume starts from.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from framework.errors import CheckpointError
from framework.io.checkpoint_dir import (
    META_FILE,
    SET_ASIDE_SUFFIX,
    is_complete_sharded,
    is_sharded_checkpoint,
    load_sharded,
    remove_sharded,
)
from framework.io.checkpoint_file import (
    FORMAT_VERSION,
    is_complete_checkpoint_file,
    load_checkpoint_file,
    save_checkpoint_file,
)
from framework.io.deepspeed_dir import is_complete_deepspeed, is_deepspeed_checkpoint
from framework.io.fs import filesystem, is_local, modified_time, names_in

__all__ = ["FORMAT_VERSION", "SET_ASIDE_SUFFIX", "CheckpointChoice", "check_trainer_checkpoint", "choose_checkpoint",
           "complete_checkpoint_at", "complete_checkpoints_in", "is_complete_checkpoint", "load_checkpoint",
           "newest_complete_checkpoint", "peek_checkpoint", "remove_checkpoint", "save_checkpoint"]


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

    :raises CheckpointError: where the file is damaged or written by a newer framework, or holds pickled objects
        beyond tensors and plain data (an ``UnsafeCheckpointError``; not with ``weights_only=False``), or where
        ``path`` is a directory but not a sharded checkpoint (DeepSpeed's included).
    :raises FileNotFoundError: where ``path`` does not exist.
    """
    fs, inner = filesystem(path)
    if fs.isdir(inner):
        if is_sharded_checkpoint(path):
            return load_sharded(path, leave_split_unread=leave_split_unread, weights_only=weights_only)
        if is_deepspeed_checkpoint(path):
            raise CheckpointError(
                f"Checkpoint {os.fspath(path)!r} was written by DeepSpeed (strategy='deepspeed...'): resume it with "
                "that strategy. To use it elsewhere, turn it into one file first: `framework consolidate "
                f"{os.fspath(path)} model.ckpt` (the weights; DeepSpeed's optimizer state does not carry over to "
                "another strategy), then load that file with Module.load_from_checkpoint or ckpt_path=.")
        raise CheckpointError(f"Checkpoint {os.fspath(path)!r} is a directory, but not a sharded checkpoint.")
    return load_checkpoint_file(path, map_location, weights_only)


def check_trainer_checkpoint(checkpoint: Any, path: str | os.PathLike) -> dict[str, Any]:
    """``checkpoint`` (read from ``path``) if it is what ``trainer.save_checkpoint`` or Lightning writes, a dict
    with the model's ``"state_dict"``; otherwise a ``CheckpointError`` saying what the file holds instead."""
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("state_dict"), dict):
        return checkpoint
    where = f"{os.fspath(path)!r}"
    if isinstance(checkpoint, dict) and checkpoint and all(isinstance(value, torch.Tensor)
                                                           for value in checkpoint.values()):
        names = ", ".join(repr(name) for name in list(checkpoint)[:3])
        raise CheckpointError(
            f"{where} holds a bare state_dict ({len(checkpoint)} tensors: {names}...), not a checkpoint of a run: "
            "there is no optimizer or loop state to resume from. Load it into the model before training instead: "
            "model.load_state_dict(torch.load(path, weights_only=True))."
        )
    if isinstance(checkpoint, dict):
        keys = ", ".join(repr(key) for key in list(checkpoint)[:8]) or "none"
        raise CheckpointError(
            f"{where} holds a dict without a 'state_dict' entry (its keys: {keys}), so it is not a checkpoint that "
            "trainer.save_checkpoint (or Lightning) wrote. Pass a checkpoint of a run as ckpt_path."
        )
    raise CheckpointError(f"{where} holds {_described(checkpoint)}, not a checkpoint (a dict with the model's "
                          "'state_dict', as trainer.save_checkpoint writes). Pass a checkpoint of a run as ckpt_path.")


def _described(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"a {type(value).__name__}"


def peek_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The checkpoint at ``path``, its tensors' data left unread where that can be: a local file is mapped into
    memory (``torch.load(mmap=True)``, which reads only the pickled structure), a directory's tensors stay
    markers (only ``meta.pt`` is read); a file elsewhere is read whole. For looking at a checkpoint's counters
    and stamps before choosing it; ``{}`` when it cannot be read."""
    fs, inner = filesystem(path)
    try:
        if fs.isdir(inner):
            return load_checkpoint_file(f"{os.fspath(path).rstrip('/')}/{META_FILE}", map_location="cpu")
        if is_local(fs):
            try:
                return torch.load(inner, mmap=True, weights_only=True, map_location="cpu")
            except RuntimeError:  # torch's legacy format cannot be mapped
                pass
        return load_checkpoint_file(path, map_location="cpu")
    except (OSError, RuntimeError, pickle.UnpicklingError):  # CheckpointError is a RuntimeError
        return {}


def is_complete_checkpoint(path: str | os.PathLike) -> bool:
    """Whether ``path`` holds a whole checkpoint, one a resume may start from.

    A file counts when it is named as a finished file (not the ``<name>.tmp-<8 hex>`` temporary of an
    atomic write) and is whole: a torch.save archive ending with its end record (a file in torch's legacy
    format: when not empty). A directory counts when it is a sharded checkpoint whose commit marker
    (``meta.pt``, written after every rank's parts and DCP's ``.metadata``) is there and whole, or a DeepSpeed
    checkpoint whose ``meta.pt`` is whole and whose files are all there at the sizes it lists. A link
    counts as its target. Anything missing, partial or unreadable: False. Reads at most 64 KiB.
    """
    fs, inner = filesystem(path)
    if fs.isdir(inner):
        return is_complete_sharded(path) or is_complete_deepspeed(path)
    return is_complete_checkpoint_file(path)


def newest_complete_checkpoint(paths: Iterable[str | os.PathLike]) -> str | None:
    """The newest of ``paths`` that ``is_complete_checkpoint``, as a string; None when none is.

    Newest by modification time: of the file (a link: of its target), of a directory's commit marker
    (``meta.pt``: a directory's own time changes whenever an entry does, and not when it is renamed). Equal
    times go to the greater path, so every rank picks the same one.
    """
    return choose_checkpoint(paths).path


@dataclass(frozen=True)
class CheckpointChoice:
    """What ``choose_checkpoint`` found: ``path``, the newest complete checkpoint (None when none is), and
    ``broken``, the incomplete or damaged ones passed over that are newer than it (all of them, without one)."""

    path: str | None
    broken: tuple[str, ...]


def choose_checkpoint(paths: Iterable[str | os.PathLike],
                      is_complete: Callable[[str], bool] = is_complete_checkpoint) -> CheckpointChoice:
    """The newest complete of ``paths`` (as ``newest_complete_checkpoint``), and the broken ones newer than it,
    for a warning that names both: a resume never passes over a broken checkpoint without a word.
    ``is_complete`` judges each (a ``CheckpointIO`` plugin's ``is_complete`` for the files it writes)."""
    complete, broken = [], []
    for path in dict.fromkeys(os.fspath(path) for path in paths):
        (complete if is_complete(path) else broken).append(path)
    chosen = max(complete, key=lambda path: (_commit_time(path), path), default=None)
    since = _commit_time(chosen) if chosen is not None else float("-inf")
    return CheckpointChoice(chosen, tuple(sorted(path for path in broken if _written_time(path) >= since)))


def complete_checkpoints_in(directory: str, extension: str = ".ckpt",
                            is_complete: Callable[[str], bool] = is_complete_checkpoint) -> list[str]:
    """The complete checkpoints (files and directories) in ``directory`` whose names end with ``extension``."""
    paths = [f"{directory.rstrip('/')}/{name}" if "://" in directory else os.path.join(directory, name)
             for name in names_in(directory) if name.endswith(extension)]
    return [path for path in paths if is_complete(path)]


def complete_checkpoint_at(path: str | os.PathLike,
                           is_complete: Callable[[str], bool] = is_complete_checkpoint) -> str | None:
    """``path`` if it holds a complete checkpoint; else the whole previous checkpoint a save killed while
    replacing ``path`` left at ``path + SET_ASIDE_SUFFIX`` (``checkpoint_dir``'s protocol), if there is
    one; else None."""
    path = os.fspath(path).rstrip("/")
    if is_complete(path):
        return path
    previous = path + SET_ASIDE_SUFFIX
    return previous if is_complete(previous) else None


def remove_checkpoint(path: str | os.PathLike) -> None:
    """Delete the checkpoint at ``path`` (a file, a link, or a directory) if it is there; a directory is
    first renamed away, so a kill midway never leaves a partial one under the name."""
    remove_sharded(path)


def _commit_time(path: str) -> float:
    fs, inner = filesystem(path)
    return modified_time(f"{path.rstrip('/')}/{META_FILE}" if fs.isdir(inner) else path)


def _written_time(path: str) -> float:
    """When ``path`` was last written, whatever its state (a directory without its commit marker: its own time)."""
    for candidate in (lambda: _commit_time(path), lambda: modified_time(path)):
        try:
            return candidate()
        except OSError:  # missing
            continue
    return 0.0
