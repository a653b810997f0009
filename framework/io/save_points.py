"""Which background writer's save point the caller is inside, if any (``AsyncCheckpointIO.save_point()``).

The file writers below the Trainer ask ``collecting_writer()`` before writing: inside a save point they hand
the write to that writer's background job (``stage`` the state to host memory, then ``add_write``) instead of
writing now.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Protocol


class SavePointWriter(Protocol):
    """What a writer collecting a save point's writes offers the file writers."""

    def stage(self, value: Any) -> Any:
        """``value`` with every tensor copied to host memory."""

    def add_write(self, path: str, write: Callable[[], None]) -> None:
        """Run ``write`` (which writes ``path``) in the save point's background job."""

    def then(self, action: Callable[[], None], description: str) -> None:
        """Run ``action`` once the writes added so far succeeded."""

    def process_group(self) -> Any:
        """The process group the background collectives run on (sharded checkpoints), or None."""


COLLECTING: ContextVar[SavePointWriter | None] = ContextVar("framework_checkpoint_save_point", default=None)


def collecting_writer() -> SavePointWriter | None:
    """The writer whose save point the caller is inside, or None (then write right away)."""
    return COLLECTING.get()
