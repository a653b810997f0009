"""Each rank's heartbeat in the store torchrun's ranks share, so that a rank whose collective timed out can name the
rank that keeps it waiting, and end it.

A daemon thread writes ``framework/alive/<rank>`` every ``INTERVAL_S`` seconds over its own connection (the time, the
rank's host and process id, and where its main thread is): nothing runs in the training step. Two kinds of rank keep
a collective waiting:

- a silent one (stopped with SIGSTOP, frozen in a system call, its machine gone): its threads stop too, so its beat
  goes stale (``silent_ranks``);
- a busy one (an endless loop, a wait that never ends): it still beats, but its main thread is not in a collective
  (``busy_ranks``; what counts as "in a collective" is ``_WAITING_IN``).

torchrun's agent waits 30 s for a failed attempt's ranks to end on SIGTERM, which a stopped process never handles:
such ranks on this machine are killed at once instead (``end_ranks_here``). Each beat also runs what the caller asks
(``each_beat``): :mod:`framework.runtime.peer_failure` ends a rank whose preemption signal cannot be answered because
a peer is gone (``gone_ranks``).

Example::

    start_heartbeat(store, rank)                          # in each rank
    silent_ranks(store, world_size, older_than_s=3.0)     # in a rank whose collective timed out: {1: Beat(...)}
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

INTERVAL_S = 1.0
STOP_WAIT_S = 5.0  # at exit, for a beat to end its store call (a store that is gone fails at once)
_KEY = "framework/alive/{rank}"
_started = False
# A main thread whose innermost Python frame is in one of these waits for the other ranks: a collective, DDP's gradient
# sync in the autograd engine, or the framework's own waits (the stop vote, barriers).
_WAITING_IN = tuple(os.path.join(*parts) + os.sep for parts in (
    ("torch", "distributed"), ("torch", "autograd"), ("torch", "nn", "parallel"), ("framework", "strategies")))


class Beat(NamedTuple):
    """A rank's last beat: seconds since, its host and process id, and where its main thread ran (``"file:line in
    function"``), or "" while it waited for the other ranks."""

    age: float
    host: str
    pid: int
    busy_at: str


def start_heartbeat(store: Any, rank: int, each_beat: Callable[[], None] | None = None) -> None:
    """Beat for ``rank`` into ``store`` (a TCPStore client of its own) from a daemon thread, calling ``each_beat``
    after each; once per process."""
    global _started
    if _started:
        return
    _started = True
    key = _KEY.format(rank=rank)
    who = f"{socket.gethostname()} {os.getpid()}"
    main = threading.main_thread().ident

    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            try:
                store.set(key, f"{time.time()!r} {who} {_where(main) or '-'}")
                if each_beat is not None:
                    each_beat()
            except Exception:  # the store went away with the run: nothing left to tell
                return
            stop.wait(INTERVAL_S)

    thread = threading.Thread(target=beat, name="framework-heartbeat", daemon=True)
    thread.start()
    atexit.register(_stop_beating, stop, thread)


def _stop_beating(stop: threading.Event, thread: threading.Thread) -> None:
    # A daemon thread still inside a store call when the interpreter finalizes aborts the whole process
    # ("terminate called without an active exception", status -6, after the run succeeded): let it leave first.
    stop.set()
    thread.join(STOP_WAIT_S)


def _where(thread: int | None) -> str:
    frame = sys._current_frames().get(thread)
    if frame is None or any(part in frame.f_code.co_filename for part in _WAITING_IN):
        return ""
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} in {frame.f_code.co_name}"


def silent_ranks(store: Any, world_size: int, older_than_s: float) -> dict[int, Beat]:
    """The ranks whose last beat is older than ``older_than_s`` seconds. Ranks that never beat are left out: they
    may not have started one."""
    return {rank: beat for rank, beat in _last_beats(store, world_size).items() if beat.age > older_than_s}


def busy_ranks(store: Any, world_size: int, older_than_s: float) -> dict[int, Beat]:
    """The ranks heard from within ``older_than_s`` seconds whose main thread was not waiting for the other ranks."""
    return {rank: beat for rank, beat in _last_beats(store, world_size).items()
            if beat.age <= older_than_s and beat.busy_at}


def gone_ranks(store: Any, world_size: int, elsewhere_after_s: float) -> list[int]:
    """The ranks known to have ended: on this machine, those whose process is gone; on others, those not heard from
    for ``elsewhere_after_s`` seconds (a busy machine can delay a beat by a few seconds, so keep this long)."""
    here, gone = socket.gethostname(), []
    for rank, beat in _last_beats(store, world_size).items():
        ended = not _process_exists(beat.pid) if beat.host == here else beat.age > elsewhere_after_s
        if ended:
            gone.append(rank)
    return gone


def end_ranks_here(ranks: dict[int, Beat]) -> list[int]:
    """SIGKILL those of ``ranks`` that run on this machine (they would keep their launcher waiting); the ranks
    ended."""
    ended = []
    for rank, beat in ranks.items():
        if beat.host == socket.gethostname():
            try:
                os.kill(beat.pid, signal.SIGKILL)
                ended.append(rank)
            except OSError:  # gone already
                pass
    return ended


def _last_beats(store: Any, world_size: int) -> dict[int, Beat]:
    now, beats = time.time(), {}
    for rank in range(world_size):
        key = _KEY.format(rank=rank)
        if store.check([key]):
            stamp, host, pid, where = store.get(key).decode().split(" ", 3)
            beats[rank] = Beat(now - float(stamp), host, int(pid), "" if where == "-" else where)
    return beats


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process took the number
        return True
    return not process_ended(pid) if os.path.isdir("/proc") else True


def process_ended(pid: int) -> bool:
    """Whether ``pid`` has ended and waits only to be collected by its parent (a zombie), or is gone (Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True
