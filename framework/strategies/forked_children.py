"""Processes a rank forks (its DataLoader workers, above all) end when the rank dies.

A forked child holds copies of the rank's sockets, the process group's among them. When a rank is killed, its
peers learn it from those connections closing, and they close only once every copy is gone: a DataLoader worker
notices that its parent died at its next check (every 5 s in torch), so until then the other ranks wait in their
collective and a restart starts 5 s later. Asking Linux to kill the child with its parent (``PR_SET_PDEATHSIG``)
closes the copies at once.

Only children forked from the thread that started the process group are asked (the main thread, or the thread a
forked rank runs its work in): the signal follows the thread that forked, and a child forked from a short-lived
thread would die with that thread. Workers a DataLoader starts from a forkserver or by spawn are not the rank's
children and keep torch's own check. Elsewhere than Linux nothing changes.

Example::

    end_forked_children_with_this_process()   # once this process is a rank of a group of several

``die_with_parent()`` asks the same for the calling process itself: the ranks framework forks or starts as new
runs of the script call it, so that none outlives the process that started it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def end_forked_children_with_this_process() -> None:
    """From now on, every child that the calling thread forks is killed when this process dies."""
    global _rank_thread
    if not sys.platform.startswith("linux"):
        return
    if _rank_thread is None:
        os.register_at_fork(before=_note_forking_thread, after_in_child=_in_child_after_fork)
    _rank_thread = threading.current_thread()


_rank_thread: threading.Thread | None = None
_forked_from_rank_thread = False  # set in the parent just before a fork; the child reads its copy


def _note_forking_thread() -> None:
    # Asked in the parent: in the child, the thread that forked is the only one, and its main thread.
    global _forked_from_rank_thread
    _forked_from_rank_thread = threading.current_thread() is _rank_thread


def _in_child_after_fork() -> None:
    if _forked_from_rank_thread:
        die_with_parent()


def die_with_parent() -> None:
    """Make the kernel kill this process when the one that started it dies (Linux), so none is orphaned."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):  # a libc without prctl: the process ends at its own pace
            pass
