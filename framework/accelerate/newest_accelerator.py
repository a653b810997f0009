"""Which ``Accelerator`` this process made last: the one Accelerate's state objects and free functions use.

Kept apart from ``utils`` (which re-exports it) so that the prepared optimizer and scheduler, which
``utils`` exports in their DeepSpeed form, can ask for it without importing ``utils``.
"""

from __future__ import annotations

import weakref
from typing import Any

_newest: weakref.ref | None = None


def register_accelerator(accelerator: Any) -> None:
    """Make ``accelerator`` the one the state objects and free functions use (every new Accelerator calls this)."""
    global _newest
    _newest = weakref.ref(accelerator)


def current_accelerator() -> Any:
    """This process's newest Accelerator still alive (held weakly: it goes when the Accelerator goes), or None."""
    return _newest() if _newest is not None else None
