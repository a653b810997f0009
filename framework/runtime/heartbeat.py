"""Each rank's heartbeat in the store torchrun's ranks share, so that a rank whose collective timed out can name the
rank that went silent (stopped with SIGSTOP, frozen in a system call, its machine gone), and end it.

A daemon thread writes ``framework/alive/<rank>`` (the time, its host and process id) every ``INTERVAL_S`` seconds
over its own connection: nothing runs in the training step. A stopped process's threads stop too, so its beat goes
stale; a rank caught in an endless loop of Python still beats, and is stopped by its launcher once the others have
failed. torchrun's agent waits 30 s for a failed attempt's ranks to end on SIGTERM, which a stopped process never
handles: a silent rank on this machine is killed at once instead (``end_silent_ranks``).

Example::

    start_heartbeat(store_address, store_port, rank)      # in each rank
    silent_ranks(store, world_size, older_than_s=10.0)    # in a rank whose collective timed out: [1]
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from typing import Any

INTERVAL_S = 1.0
_KEY = "framework/alive/{rank}"
_started = False


def start_heartbeat(store: Any, rank: int) -> None:
    """Beat for ``rank`` into ``store`` (a TCPStore client of its own) from a daemon thread; once per process."""
    global _started
    if _started:
        return
    _started = True
    key = _KEY.format(rank=rank)
    where = f"{socket.gethostname()} {os.getpid()}"

    def beat() -> None:
        while True:
            try:
                store.set(key, f"{time.time()!r} {where}")
            except Exception:  # the store went away with the run: nothing left to tell
                return
            time.sleep(INTERVAL_S)

    threading.Thread(target=beat, name="framework-heartbeat", daemon=True).start()


def silent_ranks(store: Any, world_size: int, older_than_s: float) -> dict[int, tuple[float, str, int]]:
    """The ranks whose last beat is older than ``older_than_s`` seconds: rank -> (seconds since it was heard from,
    its host, its process id). Ranks that never beat are left out: they may not have started one."""
    now, silent = time.time(), {}
    for rank in range(world_size):
        key = _KEY.format(rank=rank)
        if store.check([key]):
            stamp, host, pid = store.get(key).decode().split()
            if now - float(stamp) > older_than_s:
                silent[rank] = (now - float(stamp), host, int(pid))
    return silent


def end_silent_ranks(silent: dict[int, tuple[float, str, int]]) -> list[int]:
    """SIGKILL the silent ranks that run on this machine (they would keep their launcher waiting); the ranks ended."""
    ended = []
    for rank, (_, host, pid) in silent.items():
        if host == socket.gethostname():
            try:
                os.kill(pid, signal.SIGKILL)
                ended.append(rank)
            except OSError:  # gone already
                pass
    return ended
