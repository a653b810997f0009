"""``AsyncCheckpointIO``: checkpoints written in a background thread while training goes on.

A *save point* is the moment a callback saves (a top-k file, ``last.ckpt``, the deletion of a
file that fell out of the top k). Inside ``save_point()`` the checkpoint writers of this package
(``save_checkpoint``, ``save_sharded``) copy the state to host memory and hand the writing to a
background job instead of writing it; when the block ends, the job starts: the writes in order,
then the follow-ups (``then``) such as deleting the old files, run only if every write before
them succeeded. At most one job is in flight: a save point first waits for the previous one.

A failed write is raised, naming the path, by the next ``wait()`` (the next save point, or the
end of fit), never lost. Writes keep their atomicity (a temporary name renamed into place), so a
crash mid-write leaves the previous checkpoints whole.

Example::

    writer = AsyncCheckpointIO()
    with writer.save_point():
        save_checkpoint(state, "step=100.ckpt")   # copied now, written in the background
        writer.then(lambda: remove("step=50.ckpt"), "delete step=50.ckpt")
    ...                                           # training goes on
    writer.wait()                                 # the file is complete (or its error is raised here)
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from framework.errors import CheckpointError
from framework.io.checkpoint_io import CheckpointIO, TorchCheckpointIO, load_through
from framework.io.fs import make_dirs
from framework.io.save_points import COLLECTING, collecting_writer
from framework.io.staging import Stager


class AsyncCheckpointIO(CheckpointIO):
    """Write the checkpoints of ``ModelCheckpoint`` in a background thread (Lightning's plugin of this name),
    through ``checkpoint_io`` (default: ``TorchCheckpointIO``).

    Give it to the Trainer, and every ``ModelCheckpoint`` of the run saves in the background
    (``ModelCheckpoint(async_save=True)`` does the same for one callback)::

        trainer = Trainer(plugins=[AsyncCheckpointIO()], callbacks=[ModelCheckpoint(every_n_train_steps=500)])

    Training goes on as soon as the state is copied to host memory (kept between saves: as
    much memory as one checkpoint). Sharded checkpoints (zero2/zero3) are written by every rank
    through ``torch.distributed.checkpoint`` on a process group of their own. ``trainer.save_checkpoint``
    called by you stays synchronous (Lightning's returns before the file is written).

    :raises TypeError: where ``checkpoint_io`` is neither ``None`` nor a ``CheckpointIO``.
    """

    def __init__(self, checkpoint_io: CheckpointIO | None = None) -> None:
        if checkpoint_io is not None and not isinstance(checkpoint_io, CheckpointIO):
            raise TypeError(f"AsyncCheckpointIO(checkpoint_io={checkpoint_io!r}): accepted is None or a CheckpointIO.")
        self.checkpoint_io = checkpoint_io if checkpoint_io is not None else TorchCheckpointIO()
        self._stager = Stager()
        self._collected: list[_Step] | None = None
        self._job: _Job | None = None
        self._group: Any = None
        self._group_of: Any = None  # the default process group the background group was made beside

    # -- save points ---
    @contextlib.contextmanager
    def save_point(self) -> Iterator[AsyncCheckpointIO]:
        """Collect the writes made inside; they start in the background when the block ends (see the module).

        :raises RuntimeError: where a save point of this object is open already (they do not nest).
        """
        if self._collected is not None:
            raise RuntimeError("AsyncCheckpointIO.save_point() is already open; save points do not nest.")
        self.wait()
        self._collected = []
        token = COLLECTING.set(self)
        try:
            with self._stager.staging():
                yield self
        finally:
            COLLECTING.reset(token)
            steps, self._collected = self._collected, None
            if steps:  # even after an error inside: each staged write is a whole checkpoint of its moment
                self._job = _Job(steps)
                self._job.start()

    def stage(self, value: Any) -> Any:
        """``value`` with every tensor copied to host memory (inside ``save_point``), for ``add_write``."""
        self._require_save_point("stage")
        return self._stager.stage(value)

    def add_write(self, path: str, write: Callable[[], None]) -> None:
        """Run ``write`` (which writes ``path`` from staged state) in this save point's background job."""
        self._require_save_point("add_write")
        self._collected.append(_Step(write, f"writing the checkpoint {path!r}", follow_up=False))

    def then(self, action: Callable[[], None], description: str) -> None:
        """Run ``action`` once the writes added so far have succeeded (at once outside a save point).

        ``description`` says what it does, for the error message if it fails.
        """
        if self._collected is None:
            action()
        else:
            self._collected.append(_Step(action, description, follow_up=True))

    @property
    def in_flight(self) -> bool:
        """Whether a background job has not finished yet."""
        return self._job is not None and self._job.is_alive()

    def wait(self) -> None:
        """Wait for the job in flight; raise its error (once), naming what failed."""
        job = self._job
        if job is None:
            return
        job.join()
        self._job = None  # only now: a wait interrupted (Ctrl-C) leaves the job for the next one
        if job.error is not None:
            raise job.error

    def teardown(self) -> None:
        """Wait for the job in flight (raising its error), then free the staging memory."""
        try:
            self.wait()
        finally:
            self._stager.release()
            self.checkpoint_io.teardown()

    # -- the CheckpointIO methods ---
    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike,
                        storage_options: Any | None = None) -> None:
        """Inside a save point: copy ``checkpoint`` to host memory and write it in the background; outside one,
        write it now. Either way through ``checkpoint_io``."""
        save_through(self.checkpoint_io, checkpoint, path, storage_options)

    def load_checkpoint(self, path: str | os.PathLike, map_location: Any | None = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        """``checkpoint_io``'s load, once the writes in flight are done (one may be the file asked for)."""
        self.wait()
        if map_location is None:
            return load_through(self.checkpoint_io, path, weights_only)
        return self.checkpoint_io.load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path: str | os.PathLike) -> None:
        """``checkpoint_io``'s removal: after the writes in flight inside a save point, at once outside one."""
        self.then(lambda: self.checkpoint_io.remove_checkpoint(path), f"deleting {os.fspath(path)!r}")

    def is_complete(self, path: str | os.PathLike) -> bool:
        """``checkpoint_io``'s judgement."""
        return self.checkpoint_io.is_complete(path)

    # -- for sharded checkpoints ---
    def process_group(self) -> Any:
        """A gloo group of all ranks for the background writes' collectives, or None without torch.distributed.

        The writes' collectives run in the background thread: on the training's own group they
        could interleave with the training's collectives differently on each rank. Made at the
        first sharded save (every rank gets there together), again after the default group changed.
        """
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return None
        default = dist.distributed_c10d._get_default_group()
        if self._group_of is not default:
            self._group = dist.new_group(backend="gloo")
            self._group_of = default
        return self._group

    def _require_save_point(self, what: str) -> None:
        if self._collected is None:
            raise RuntimeError(f"AsyncCheckpointIO.{what}() is for use inside save_point().")

    def __getstate__(self) -> dict[str, Any]:  # a copy in another process starts with nothing in flight
        return {**self.__dict__, "_collected": None, "_job": None, "_group": None, "_group_of": None}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.checkpoint_io!r})"


def save_through(checkpoint_io: CheckpointIO, checkpoint: dict[str, Any], path: str | os.PathLike,
                 storage_options: Any | None) -> None:
    """``checkpoint_io.save_checkpoint(...)``, in the background when inside a save point.

    framework's own writers hand themselves to the save point; another plugin's save is given a copy of the state
    in host memory and runs in the background job.
    """
    writer = collecting_writer()
    if writes_framework_files(checkpoint_io):
        checkpoint_io.save_checkpoint(checkpoint, path, storage_options)
        return
    make_dirs(_parent(os.fspath(path)))  # a plugin that opens the path as it is finds its directory there
    if writer is None:
        checkpoint_io.save_checkpoint(checkpoint, path, storage_options)
        return
    staged = writer.stage(checkpoint)
    writer.add_write(os.fspath(path), lambda: checkpoint_io.save_checkpoint(staged, path, storage_options))


def _parent(path: str) -> str:
    if "://" in path:
        return path.rstrip("/").rpartition("/")[0]
    return os.path.dirname(path) or "."


def writes_framework_files(checkpoint_io: CheckpointIO) -> bool:
    """Whether ``checkpoint_io`` saves through framework's own writer (``TorchCheckpointIO``'s, wrapped or not),
    so its files are in framework's format."""
    if isinstance(checkpoint_io, AsyncCheckpointIO):
        return writes_framework_files(checkpoint_io.checkpoint_io)
    return getattr(type(checkpoint_io), "save_checkpoint", None) is TorchCheckpointIO.save_checkpoint


@dataclass
class _Step:
    run: Callable[[], None]
    description: str
    follow_up: bool  # runs only when everything before it succeeded; a write always runs (it may be collective)


class _Job(threading.Thread):
    """One save point's steps, in order, in a background thread; the first failure is kept in ``error``.

    Not a daemon: an interpreter that exits normally first lets the write finish.
    """

    def __init__(self, steps: list[_Step]) -> None:
        super().__init__(name="framework-checkpoint-writer", daemon=False)
        self.steps = steps
        self.error: CheckpointError | None = None

    def run(self) -> None:
        _yield_to_training()
        for step in self.steps:
            if step.follow_up and self.error is not None:
                continue
            try:
                step.run()
            except BaseException as error:  # noqa: BLE001 - kept and raised in the training thread
                if self.error is None:
                    self.error = CheckpointError(f"In the background, {step.description} failed: "
                                                 f"{type(error).__name__}: {error}")
                    self.error.__cause__ = error
        self.steps = []  # the staged state is not needed any more


def _yield_to_training() -> None:
    """Give this thread (and the threads it starts) the lowest CPU priority, where a thread can have its own.

    On a machine whose cores training keeps busy (CPU training), a writer competing at equal
    priority stalls the training's thread team at every parallel region: steps measured 3-5x
    slower while it wrote, more than the whole write costs done synchronously. At the lowest
    priority it takes the cycles training leaves idle (all of them, while the next save point
    waits for it).
    """
    if sys.platform.startswith("linux"):  # Linux threads are scheduled alone: their nice value is their own
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)

