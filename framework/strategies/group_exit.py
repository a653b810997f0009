"""Ending the process group at a rank's end without waiting on the other ranks for long.

A destroy of the group while a peer still closes it can abort gloo in that peer (SIGABRT at exit), so the ranks
first meet. They meet in the group's store, not in a collective: a rank that leaves early (``sys.exit`` in the
middle of the run) would otherwise wait in a barrier while the others wait in another collective, each for the
other, until the 30-minute timeout, and no launcher would see anything end. In the store each rank adds itself to
a count and waits until every rank has, for ``EXIT_WAIT_S`` seconds at most; then, if all came, destroys the
group (rank 0, which usually holds the store, first waits up to a second more until every rank has read that all
came). If not, it leaves the group as it is: its process ends, its connections close, and a peer waiting for it
in a collective fails at once ("Connection closed by peer"), naming this rank (:mod:`framework.runtime.peer_failure`)
for the launcher to end the job.

Example::

    if all_ranks_leaving(rank, world_size):     # at most EXIT_WAIT_S seconds
        dist.destroy_process_group()
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

EXIT_WAIT_S = 3.0
_COUNT_KEY = "framework/leaving/{group}"
_SEEN_KEY = "framework/all-leaving/{group}"  # how many ranks saw that every rank came
_SEEN_WAIT_S = 1.0
_LEFT_KEY = "framework/left/{group}/{rank}"  # "<time> <host> <pid>": this rank has reached its end
_POLL_S = 0.02

_group = 0  # how many process groups this process started before this one (every rank counts alike)
_counted = False  # this process added itself already (end_training, then its exit)
_saw_all = False  # ... and to the count of those that saw every rank come


def all_ranks_leaving(rank: int, world_size: int, wait_s: float = EXIT_WAIT_S) -> bool:
    """Count this rank among those at their end and wait up to ``wait_s`` seconds for the others; whether every
    rank got there (False as well where the store is gone: a rank that held it ended)."""
    global _counted, _saw_all
    import torch.distributed as dist

    try:
        store = dist.distributed_c10d._get_default_store()
        first_time = not _counted
        if first_time:
            stamp = f"{time.time()!r} {socket.gethostname()} {os.getpid()}"
            store.set(_LEFT_KEY.format(group=_group, rank=rank), stamp)
            _counted = True
        arrived = _count_until_all(store, _COUNT_KEY.format(group=_group), int(first_time), world_size, wait_s)
        if arrived >= world_size:
            # Rank 0 usually holds the store: ending before the others have read the full count would cut them
            # off in their next read (torch prints "Connection reset by peer" with a C++ trace, and they skip
            # their destroy), so it waits until they have said they saw it.
            _count_until_all(store, _SEEN_KEY.format(group=_group), int(not _saw_all), world_size,
                             _SEEN_WAIT_S if rank == 0 else 0.0)
            _saw_all = True
    except (RuntimeError, ValueError):  # torch's DistNetworkError, DistStoreError; no default group any more
        return False
    return arrived >= world_size


def _count_until_all(store: Any, key: str, add: int, world_size: int, wait_s: float) -> int:
    """Add ``add`` to the count under ``key``, then read it until it reaches ``world_size``, for ``wait_s``
    seconds at most; the last count read."""
    count = store.add(key, add)
    deadline = time.monotonic() + wait_s
    while count < world_size and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        count = store.add(key, 0)
    return count


def ranks_that_left(store: object, world_size: int) -> dict[int, tuple[float, str, int]]:
    """The ranks that reached their end (``all_ranks_leaving``), with when (seconds since the epoch), where and
    which process."""
    left = {}
    for rank in range(world_size):
        key = _LEFT_KEY.format(group=_group, rank=rank)  # this group's: an earlier one's ranks all left it
        if store.check([key]):  # type: ignore[attr-defined]
            stamp, host, pid = store.get(key).decode().split(" ")  # type: ignore[attr-defined]
            left[rank] = (float(stamp), host, int(pid))
    return left


def group_started() -> None:
    """A new process group starts (after an earlier one ended, in a later run in this process): no rank has left
    it yet."""
    global _counted, _group, _saw_all
    if _counted:
        _group += 1
    _counted = _saw_all = False
