"""A checkpoint callback's saves in the background: when it waits for the writer, and how the ranks agree on a
failed write."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from framework import console
from framework.errors import CheckpointError
from framework.io.async_writer import AsyncCheckpointIO

if TYPE_CHECKING:
    from framework.trainer.trainer import Trainer


class BackgroundSaves:
    """The callback's side of an ``AsyncCheckpointIO`` during one run: ``writer`` is the Trainer's
    (``plugins=[AsyncCheckpointIO()]``) or the callback's own (``async_save=True``), or None, and then everything
    happens at once.

    Each save point first finishes the previous one's writes (every rank raises if one rank's
    failed, so none waits for the others in a collective), then collects its own. Whatever must
    not happen before the new file is complete (deleting the file it replaces, telling the
    loggers, which upload it) waits for the writes.

    Example::

        saves = BackgroundSaves(callback, trainer.checkpoint_io or AsyncCheckpointIO())
        with saves.save_point(trainer):
            trainer.save_checkpoint(path)                       # copied now, written in the background
            saves.after_writes(lambda: remove(old), f"deleting {old!r}")
        ...
        saves.end(trainer)                                      # at the end of fit: every file complete
    """

    def __init__(self, callback: Any, writer: AsyncCheckpointIO | None) -> None:
        self._callback = callback
        self.writer = writer
        self._collecting = False
        self._loggers_to_tell = False

    @contextlib.contextmanager
    def save_point(self, trainer: Trainer) -> Iterator[None]:
        """Every rank calls it at the same save point; the saves inside go to the background."""
        if self.writer is None:
            yield
            return
        self.finish(trainer)
        with self.writer.save_point():
            self._collecting = True
            try:
                yield
            finally:
                self._collecting = False

    def after_writes(self, action: Callable[[], None], description: str) -> None:
        """Run ``action`` once this save point's files are written (at once, when nothing is in the background)."""
        if self._collecting:
            self.writer.then(action, description)
        else:
            action()

    def saved(self, trainer: Trainer) -> None:
        """A file was saved: the loggers hear of it (``after_save_checkpoint``) once it is complete."""
        if self._collecting:
            self._loggers_to_tell = True
        else:
            _tell_loggers(trainer, self._callback)

    def finish(self, trainer: Trainer) -> None:
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

    def end(self, trainer: Trainer) -> None:
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


def _tell_loggers(trainer: Trainer, callback: Any) -> None:
    if trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.after_save_checkpoint(callback)
