"""Which ``Accelerator`` this process made last: the one Accelerate's state objects and free functions use.

Kept apart from ``utils`` (which re-exports it) so that the prepared optimizer and scheduler, which
``utils`` exports in their DeepSpeed form, can ask for it without importing ``utils``.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

# With the id of the process that made it: a rank forked from a process that had made an Accelerator (a notebook,
# a test) inherits the reference, but that Accelerator ran on the parent's one process, not on this rank's group.
_newest: tuple[int, weakref.ref] | None = None


def register_accelerator(accelerator: Any) -> None:
    """Make ``accelerator`` the one the state objects and free functions use (every new Accelerator calls this)."""
    global _newest
    _newest = (os.getpid(), weakref.ref(accelerator))


def current_accelerator() -> Any:
    """This process's newest Accelerator still alive (held weakly: it goes when the Accelerator goes), or None."""
    if _newest is None or _newest[0] != os.getpid():
        return None
    return _newest[1]()
