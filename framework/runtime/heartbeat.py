"""Each rank's heartbeat in the store torchrun's ranks share, so that a rank whose collective timed out can name the
rank that went silent (stopped with SIGSTOP, frozen in a system call, its machine gone), and end it.

A daemon thread writes ``framework/alive/<rank>`` (the time, its host and process id) every ``INTERVAL_S`` seconds
over its own connection: nothing runs in the training step. A stopped process's threads stop too, so its beat goes
stale; a rank caught in an endless loop of Python still beats, and is stopped by its launcher once the others have
failed. torchrun's agent waits 30 s for a failed attempt's ranks to end on SIGTERM, which a stopped process never
handles: a silent rank on this machine is killed at once instead (``end_silent_ranks``). Each beat also runs what
the caller asks (``each_beat``): :mod:`framework.runtime.peer_failure` ends a rank whose preemption signal cannot be
answered because a peer is gone (``gone_ranks``).

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
from collections.abc import Callable
from typing import Any

INTERVAL_S = 1.0
_KEY = "framework/alive/{rank}"
_started = False


def start_heartbeat(store: Any, rank: int, each_beat: Callable[[], None] | None = None) -> None:
    """Beat for ``rank`` into ``store`` (a TCPStore client of its own) from a daemon thread, calling ``each_beat``
    after each; once per process."""
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
                if each_beat is not None:
                    each_beat()
            except Exception:  # the store went away with the run: nothing left to tell
                return
            time.sleep(INTERVAL_S)

    threading.Thread(target=beat, name="framework-heartbeat", daemon=True).start()


def silent_ranks(store: Any, world_size: int, older_than_s: float) -> dict[int, tuple[float, str, int]]:
    """The ranks whose last beat is older than ``older_than_s`` seconds: rank -> (seconds since it was heard from,
    its host, its process id). Ranks that never beat are left out: they may not have started one."""
    return {rank: beat for rank, beat in _last_beats(store, world_size).items() if beat[0] > older_than_s}


def gone_ranks(store: Any, world_size: int, elsewhere_after_s: float) -> list[int]:
    """The ranks known to have ended: on this machine, those whose process is gone; on others, those not heard from
    for ``elsewhere_after_s`` seconds (a busy machine can delay a beat by a few seconds, so keep this long)."""
    here, gone = socket.gethostname(), []
    for rank, (age, host, pid) in _last_beats(store, world_size).items():
        if (host == here and not _process_exists(pid)) or (host != here and age > elsewhere_after_s):
            gone.append(rank)
    return gone


def _last_beats(store: Any, world_size: int) -> dict[int, tuple[float, str, int]]:
    now, beats = time.time(), {}
    for rank in range(world_size):
        key = _KEY.format(rank=rank)
        if store.check([key]):
            stamp, host, pid = store.get(key).decode().split()
            beats[rank] = (now - float(stamp), host, int(pid))
    return beats


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process took the number
        return True
    return True


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
