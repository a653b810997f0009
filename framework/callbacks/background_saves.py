"""A checkpoint callback's saves in the background: when it waits for the writer, and how the ranks agree on a
failed write."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from framework import console
from framework.errors import CheckpointError
from framework.io.async_writer import AsyncCheckpointIO
from framework.io.checkpoint_io import CheckpointIO
from framework.protocols import TrainerLike


class BackgroundSaves:
    """The callback's side of an ``AsyncCheckpointIO`` during one run: the writer is the Trainer's
    ``checkpoint_io`` when that is one (``plugins=[AsyncCheckpointIO()]``), or the callback's own around it
    (``async_save=True``), or None, and then everything happens at once. Files are removed through the Trainer's
    ``checkpoint_io``.

    Each save point first finishes the previous one's writes (every rank raises if one rank's
    failed, so none waits for the others in a collective), then collects its own. Whatever must
    not happen before the new file is complete (telling the loggers, which upload it) waits for
    the writes. The deletions asked for at a save point (``remove_after``) wait for all of its
    writes and links, in the background too: a kill at any moment before leaves the files they
    replace (and the file a ``last.ckpt`` link still points to) in place.

    Example::

        saves = BackgroundSaves(callback, trainer.checkpoint_io, in_background=True)
        with saves.save_point(trainer):
            trainer.save_checkpoint(path)                       # copied now, written in the background
            saves.remove_after(old)                             # deleted once the save point is whole
        ...
        saves.end(trainer)                                      # at the end of fit: every file complete
    """

    def __init__(self, callback: Any, checkpoint_io: CheckpointIO, in_background: bool = False) -> None:
        self._callback = callback
        self._checkpoint_io = checkpoint_io
        self.writer = checkpoint_io if isinstance(checkpoint_io, AsyncCheckpointIO) else \
            AsyncCheckpointIO(checkpoint_io) if in_background else None
        self._collecting = False
        self._loggers_to_tell = False
        self._removals: list[str] | None = None  # a list while a save point collects them
        self._written: set[str] = set()  # the paths saved at this save point

    @contextlib.contextmanager
    def save_point(self, trainer: TrainerLike) -> Iterator[None]:
        """Every rank calls it at the same save point; the saves inside go to the background (if there is a
        writer), the deletions asked for inside come after all of them (and after none, if one raised)."""
        if self.writer is not None:
            self.finish(trainer)
        self._removals, self._written = [], set()
        try:
            with self.writer.save_point() if self.writer is not None else contextlib.nullcontext():
                self._collecting = self.writer is not None
                try:
                    yield
                    for path in dict.fromkeys(self._removals):
                        if path in self._written:  # saved again at this save point, under the same name
                            continue
                        self.after_writes(functools.partial(self._remove, path), f"deleting {path!r}")
                finally:
                    self._collecting = False
        finally:
            self._removals = None

    def remove_after(self, path: str) -> None:
        """Delete the checkpoint ``path`` once every file of this save point is written and linked (at once
        outside a save point)."""
        if self._removals is not None:
            self._removals.append(path)
        else:
            self._remove(path)

    def _remove(self, path: str) -> None:
        # In the background job no save point is open, so an AsyncCheckpointIO's own removal runs at once.
        self._checkpoint_io.remove_checkpoint(path)

    def after_writes(self, action: Callable[[], None], description: str) -> None:
        """Run ``action`` once this save point's files are written (at once, when nothing is in the background)."""
        if self._collecting:
            self.writer.then(action, description)
        else:
            action()

    def saved(self, trainer: TrainerLike, path: str | None = None) -> None:
        """A file was saved (at ``path``): the loggers hear of it (``after_save_checkpoint``) once it is
        complete."""
        if path is not None:
            self._written.add(path)
        if self._collecting:
            self._loggers_to_tell = True
        else:
            _tell_loggers(trainer, self._callback)

    def finish(self, trainer: TrainerLike) -> None:
        """Wait for the writes in flight; on every rank raise if any rank's failed; then tell the loggers."""
        if self.writer is None:
            return
        error = None
        try:
            self.writer.wait()
        except CheckpointError as failure:
            error = failure
        failed_somewhere = trainer.runtime.reduce_boolean_decision(error is not None, all=False)
        if error is not None:
            raise error
        if failed_somewhere:
            raise CheckpointError("Writing a checkpoint in the background failed on another rank (its error is in "
                                  "that rank's output); the checkpoints saved before it are whole.")
        if self._loggers_to_tell:
            self._loggers_to_tell = False
            _tell_loggers(trainer, self._callback)

    def end(self, trainer: TrainerLike) -> None:
        """At the end of fit: every file complete (or its error raised), the staging memory freed."""
        if self.writer is not None:
            try:
                self.finish(trainer)
            finally:
                self.writer.teardown()

    def abandon(self) -> None:
        """After fit failed on this rank: wait for the writes in flight, report (not raise) their error."""
        if self.writer is None:
            return
        self._loggers_to_tell = False
        try:
            self.writer.teardown()
        except CheckpointError as error:
            console.warn_user(f"{error} (while handling the error that stopped fit)")


def _tell_loggers(trainer: TrainerLike, callback: Any) -> None:
    if trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.after_save_checkpoint(callback)
