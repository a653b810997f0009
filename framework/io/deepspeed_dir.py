"""DeepSpeed checkpoint directories: DeepSpeed's own files, with the run's state beside them, whole or not at all.

DeepSpeed's engine writes its files itself (``engine.save_checkpoint``): a ``latest`` file naming a tag folder
holding the model states (``mp_rank_00_model_states.pt``) and each rank's part of the optimizer state
(``zero_pp_rank_<r>_mp_rank_00_optim_states.pt``), plus its ``zero_to_fp32.py``. What makes a resume exact
beyond those (loop counters, the sampler's and the random generators' states, callbacks, LR schedulers,
hyperparameters) is written by rank 0 to ``meta.pt`` in the same directory, without pickled objects.

The protocol is the sharded checkpoints' (``checkpoint_dir``): the engine writes into ``<path>.tmp-<hash>``;
once every rank is done, rank 0 writes ``meta.pt`` (the commit marker), listing every file and its size; then
the directory is renamed into place. A directory counts as a checkpoint only with a whole ``meta.pt`` and every
file it lists at its size (``is_complete_deepspeed``), so a save cut short is never "latest".

Example::

    save_deepspeed(engine.save_checkpoint, state, "epoch=3.ckpt", is_writer=rank == 0, barrier=barrier)
    state = read_deepspeed_state("epoch=3.ckpt")         # meta.pt: counters, callbacks ... (no weights)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

import torch

from framework.errors import CheckpointError
from framework.io.checkpoint_dir import META_FILE, clear_interrupted_save, move_into_place, remove_sharded
from framework.io.checkpoint_file import is_complete_checkpoint_file, load_checkpoint_file
from framework.io.fs import filesystem, is_local, is_temporary, write_atomic

#: The tag folder DeepSpeed's files go in (Lightning's name for it).
TAG = "checkpoint"
LATEST_FILE = "latest"
#: Where ``meta.pt`` keeps what identifies the directory as DeepSpeed's, and its file list.
KEY = "deepspeed"


def is_deepspeed_checkpoint(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory holding a DeepSpeed checkpoint (DeepSpeed's ``latest`` file in it)."""
    fs, inner = filesystem(path)
    inner = inner.rstrip("/")
    return fs.isdir(inner) and fs.exists(f"{inner}/{LATEST_FILE}")


def is_complete_deepspeed(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a whole DeepSpeed checkpoint written by ``save_deepspeed``: under a finished name, with
    a whole ``meta.pt`` and every file it lists at the size it lists."""
    path = os.fspath(path).rstrip("/")
    if is_temporary(path) or not is_deepspeed_checkpoint(path):
        return False
    if not is_complete_checkpoint_file(f"{path}/{META_FILE}"):
        return False
    try:
        files = read_deepspeed_state(path)[KEY]["files"]
    except (OSError, RuntimeError, KeyError, TypeError):
        return False
    fs, inner = filesystem(path)
    try:
        return all(fs.size(f"{inner.rstrip('/')}/{name}") == size for name, size in files.items())
    except (OSError, FileNotFoundError):
        return False


def read_deepspeed_state(path: str | os.PathLike) -> dict[str, Any]:
    """The run's state saved beside DeepSpeed's files (``meta.pt``: no weights, no optimizer state)."""
    return load_checkpoint_file(f"{os.fspath(path).rstrip('/')}/{META_FILE}", map_location="cpu")


def save_deepspeed(write: Callable[[str, str], None], state: dict[str, Any], path: str | os.PathLike,
                   is_writer: bool, barrier: Callable[[], None]) -> None:
    """Write a DeepSpeed checkpoint directory at ``path``; every rank calls it.

    :param write: ``write(directory, tag)`` makes DeepSpeed write its files (``engine.save_checkpoint``; every
        rank).
    :param state: what to keep beside them in ``meta.pt`` (tensors allowed, pickled objects not).
    :param is_writer: whether this rank writes ``meta.pt`` and moves the directory into place (rank 0).
    :param barrier: waits for every rank.
    """
    path = os.fspath(path).rstrip("/")
    fs, inner = filesystem(path)
    if not is_local(fs):
        raise CheckpointError(f"Checkpoint path {path!r}: DeepSpeed writes its files to a local filesystem only; "
                              "save to a local (or mounted) directory and copy it from there.")
    temporary = f"{path}.tmp-{hashlib.sha1(path.encode()).hexdigest()[:8]}"
    if is_writer:
        clear_interrupted_save(path, temporary, is_complete_deepspeed)
    barrier()
    try:
        write(temporary, TAG)
        barrier()
        if is_writer:
            files = _sizes(temporary)
            write_atomic(f"{temporary}/{META_FILE}", lambda file: torch.save({**state, KEY: {
                "tag": TAG, "files": files}}, file))
            move_into_place(temporary, path)
    except BaseException:
        if is_writer:
            remove_sharded(temporary)
        raise
    barrier()


def _sizes(directory: str) -> dict[str, int]:
    sizes = {}
    for root, _, names in os.walk(directory):
        for name in names:
            full = os.path.join(root, name)
            sizes[os.path.relpath(full, directory)] = os.path.getsize(full)
    return sizes


def tag_of(path: str | os.PathLike) -> str:
    """The tag folder DeepSpeed's ``latest`` file names in the checkpoint directory ``path``."""
    with open(os.path.join(os.fspath(path), LATEST_FILE)) as file:
        return file.read().strip()


def model_files(path: str | os.PathLike) -> list[str]:
    """Every ``.pt`` file DeepSpeed wrote in the checkpoint directory ``path`` (its tag folder's)."""
    folder = os.path.join(os.fspath(path), tag_of(path))
    return sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".pt"))
