"""Starting the ranks of a run from the calling process (fork or spawn), and never leaving one behind.

The calling process runs no rank itself: it starts ``world_size`` workers, waits for each to
send back what its function returned, and stops all of them as soon as one raises or dies.
The workers find each other through torchrun's environment variables, which this module
sets in each of them, so the rest of the framework sees one way of being launched.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from framework.errors import MisconfigurationError
from framework.runtime.spawn_pickling import pickled_for_spawn
from framework.runtime.start_method import warn_if_fork_is_unsafe
from framework.strategies.forked_children import die_with_parent

# How long stopped workers get to exit on SIGTERM before they are killed.
TERMINATE_GRACE_S = 5.0


class RankExitedError(RuntimeError):
    """A rank ended without returning or raising: killed by a signal, ``os._exit``, or out of memory. ``rank`` and
    ``exitcode`` (negative: the signal's number) say which and how."""

    def __init__(self, message: str, rank: int = -1, exitcode: int | None = None) -> None:
        super().__init__(message)
        self.rank, self.exitcode = rank, exitcode


class _RemoteTraceback(Exception):
    """Carries a worker's traceback text, shown as the cause of the exception re-raised in the caller."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


def free_port() -> int:
    """A TCP port on this machine that nothing listens on now (for the ranks' rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_processes(function: Callable[..., Any], args: Sequence[Any], world_size: int, method: str,
                    environment: dict[str, str] | None = None) -> list[Any]:
    """Run ``function(*args)`` in ``world_size`` new processes (ranks 0 .. world_size-1); their results in rank order.

    ``method``: ``"fork"``, ``"forkserver"`` or ``"spawn"`` (``start_method.choose_start_method``
    decides); ``environment``: variables each rank gets on top of this process's environment.
    If a rank raises, the others are stopped and its exception is raised here, with the rank
    and its traceback attached; if a rank dies, ``RankExitedError`` says which and how.

    Example::

        results = start_processes(train, (config,), world_size=2, method="spawn")   # [rank 0's, rank 1's]
    """
    if method == "fork":
        warn_if_fork_is_unsafe()
    context = _context(method)
    # A forked child has its own copy of everything. Spawn pickles the arguments, and torch makes
    # multiprocessing's pickler pass tensors as shared memory: every rank would train one shared set of
    # weights. Plain pickling copies them.
    work: Any = (function, tuple(args)) if method == "fork" else pickled_for_spawn(function, tuple(args), method)
    inherited = _Inherited.from_caller(method, environment or {})
    port = free_port()
    workers: list[Any] = []
    channels: list[Connection] = []
    try:
        for rank in range(world_size):
            receiver, sender = context.Pipe(duplex=False)
            worker = context.Process(
                target=_run_worker, name=f"framework-rank-{rank}",
                args=(rank, world_size, port, inherited, sender, work),
            )
            worker.start()
            sender.close()  # the child's copy is the one that writes; the parent's would keep EOF away
            workers.append(worker)
            channels.append(receiver)
        return _collect(workers, channels)
    except BaseException:
        _stop(workers)
        raise
    finally:
        for channel in channels:
            channel.close()


@dataclass
class _Inherited:
    """What a rank takes over from the calling process, however it was started.

    A forkserver's children would otherwise have the server's environment and standard streams,
    fixed when it started (a test under pytest's capture would lose its ranks' output).
    """

    environment: dict[str, str]
    parent_pid: int | None  # the process whose death ends the rank; None: the forkserver's, found at start-up
    streams: tuple[Any, ...] = ()  # stdout and stderr, as the caller has them

    @classmethod
    def from_caller(cls, method: str, environment: dict[str, str]) -> _Inherited:
        variables = {**os.environ, **environment}
        if method != "forkserver":
            return cls(variables, os.getpid())
        return cls(variables, None, (_CallerStream(1), _CallerStream(2)))

    def take_over(self) -> None:
        """In the rank: end with the parent, and use the caller's environment and streams."""
        _die_with_parent(self.parent_pid)
        os.environ.clear()
        os.environ.update(self.environment)
        for target, stream in enumerate(self.streams, start=1):
            os.dup2(stream.detach(), target)


class _CallerStream:
    """One of the caller's file descriptors, sent along to a rank as multiprocessing sends descriptors."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, ...]:
        from multiprocessing.reduction import DupFd

        return (_as_received, (DupFd(self.fd),))  # DupFd works only while multiprocessing pickles a Process


def _as_received(descriptor: Any) -> Any:
    """In the rank: the descriptor multiprocessing handed over (its ``detach()`` gives the file descriptor)."""
    return descriptor


def _context(method: str) -> Any:
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        # The server imports these once, when it starts; every rank forked from it has them imported (torch's
        # first optimizer imports torch._dynamo, ~2 s; torchmetrics, where the caller uses it, ~0.6 s).
        preload = ["framework.runtime.worker_processes", "torch._dynamo"]
        if "torchmetrics" in sys.modules:
            preload.append("torchmetrics")
        context.set_forkserver_preload(preload)
    return context


def _collect(workers: list[Any], channels: list[Connection]) -> list[Any]:
    """Wait for every rank's result; on the first failure stop the rest and raise it."""
    world_size = len(workers)
    results: list[Any] = [None] * world_size
    waiting: dict[Any, int] = {}
    for rank, (worker, channel) in enumerate(zip(workers, channels, strict=True)):
        waiting[channel] = rank
        waiting[worker.sentinel] = rank
    done: set[int] = set()
    while len(done) < world_size:
        for ready in wait(list(waiting)):
            rank = waiting[ready]
            if rank in done:
                waiting.pop(ready, None)
                continue
            channel = channels[rank]
            if ready is not channel and not channel.poll():
                workers[rank].join()
                _stop(workers)
                raise _exited(rank, world_size, workers[rank].exitcode)
            try:
                outcome, value, text = pickle.loads(channel.recv_bytes())
            except EOFError:
                workers[rank].join()
                _stop(workers)
                raise _exited(rank, world_size, workers[rank].exitcode) from None
            if outcome == "error":
                dead = _dead_peer(workers, rank) if lost_a_peer(value) else None
                _stop(workers)
                if dead is not None:  # the rank that died is the cause; this one's collective only lost it
                    raise _exited(dead, world_size, workers[dead].exitcode) from _with_origin(value, text, rank,
                                                                                              world_size)
                raise _with_origin(value, text, rank, world_size)
            results[rank] = value
            done.add(rank)
            waiting.pop(channel, None)
    for worker in workers:
        worker.join(timeout=30)
    _stop(workers)
    return results


# How gloo and nccl report a collective whose peer process went away.
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
_DEATH_GRACE_SECONDS = 2.0


def lost_a_peer(error: BaseException) -> bool:
    """Whether ``error`` is a collective failing because another rank's process went away."""
    return isinstance(error, RuntimeError) and any(sign in str(error) for sign in _PEER_GONE)


def _dead_peer(workers: list[Any], reporting: int) -> int | None:
    """A rank other than ``reporting`` that died, waiting a moment for it: a killed process closes its
    connections (which the others notice at once) a little before its death can be collected."""
    others = {worker.sentinel: rank for rank, worker in enumerate(workers) if rank != reporting}
    for sentinel in wait(list(others), timeout=_DEATH_GRACE_SECONDS):
        worker = workers[others[sentinel]]
        worker.join(timeout=_DEATH_GRACE_SECONDS)  # its sentinel shows the death before the exit code can be read
        if worker.exitcode not in (None, 0):
            return others[sentinel]
    return None


_SIGNAL_HINTS = {
    signal.SIGKILL: " (SIGKILL often means the machine ran out of memory)",
    signal.SIGABRT: (" (gloo aborts a rank whose collective does not match the other ranks': did they take different "
                     "paths, one skipping a step or logging with sync_dist where the others did not?)"),
}


def _exited(rank: int, world_size: int, exitcode: int | None) -> RankExitedError:
    if exitcode is not None and exitcode < 0:
        how = f"was killed by {signal.Signals(-exitcode).name}"
        hint = _SIGNAL_HINTS.get(-exitcode, "")
    else:
        how, hint = f"exited with code {exitcode} before returning", ""
    return RankExitedError(f"Rank {rank} of {world_size} {how}{hint}; the other ranks were stopped.", rank, exitcode)


def _with_origin(error: BaseException, text: str, rank: int, world_size: int) -> BaseException:
    error.__cause__ = _RemoteTraceback(f"\n\nTraceback of rank {rank} of {world_size}:\n{text}")
    if hasattr(error, "add_note"):
        error.add_note(f"Raised on rank {rank} of {world_size}; the other ranks were stopped.")
    return error


def _stop(workers: list[Any]) -> None:
    """SIGTERM every worker still running, then SIGKILL those that outlive the grace period."""
    alive = [worker for worker in workers if worker.pid is not None and worker.is_alive()]
    for worker in alive:
        worker.terminate()
    for worker in alive:
        worker.join(timeout=TERMINATE_GRACE_S)
        if worker.is_alive():
            worker.kill()
            worker.join()


def _run_worker(rank: int, world_size: int, port: int, inherited: _Inherited, channel: Connection,
                work: tuple[Callable[..., Any], tuple] | bytes) -> None:
    inherited.take_over()
    os.environ.update(rank_variables(rank, world_size, port))
    _forget_inherited_process_group()
    try:
        if isinstance(work, bytes):
            function, args = _unpickled(work)
            message = ("ok", function(*args), "")
        else:
            message = ("ok", _in_new_thread(*work), "")
    except BaseException as error:  # also SystemExit and KeyboardInterrupt: the caller must hear of them
        message = ("error", error, traceback.format_exc())
    channel.send_bytes(_pickled(message))
    channel.close()


def _forget_inherited_process_group() -> None:
    """A forked rank must start its own process group: the caller may hold a one-process group (a zero3 fit on
    one device leaves it for the sharded Module), which the rank would otherwise take for the ranks'."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() == 1:
        # Kept, never destroyed here: a fork copies gloo's condition variables with their waiters but not the
        # threads waiting, so the group's destructor would wait for them forever.
        _INHERITED_GROUPS.extend(dist.distributed_c10d._world.pg_map)
        dist.destroy_process_group()  # no peers: nothing is sent, the parent's group is untouched


_INHERITED_GROUPS: list[Any] = []


def _in_new_thread(function: Callable[..., Any], args: tuple) -> Any:
    """``function(*args)`` in a thread of its own, its exception re-raised here.

    A forked process inherits the OpenMP thread pool of the thread that forked, without its
    threads: when the calling process had run a parallel operation (a large matmul ...), any
    parallel operation in the fork's main thread waits for them forever. A new thread starts
    a pool of its own, so a forked rank can use several cores.
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, function(*args)))
        except BaseException as error:  # handed to the main thread, which raises it
            outcome.append((False, error))

    # a daemon: if this thread is interrupted (SIGINT) while the rank goes on, the process exits without it
    worker = threading.Thread(target=run, name="framework-rank", daemon=True)
    worker.start()
    worker.join()
    succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return value


def _unpickled(work: bytes) -> tuple[Callable[..., Any], tuple]:
    try:
        return pickle.loads(work)
    except (AttributeError, ImportError) as error:
        raise MisconfigurationError(
            f"A spawned rank could not rebuild what it should run: {error}. Classes and functions defined in a "
            "notebook, a REPL or `python -c` exist only in the calling process: define them in an importable "
            "file (strategy='ddp_fork' forks instead, where forking is safe)."
        ) from error


def _pickled(message: tuple[str, Any, str]) -> bytes:
    try:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        if message[0] == "error":
            pickle.loads(data)  # an exception whose __init__ takes other arguments pickles but cannot be rebuilt
        return data
    except Exception as problem:
        outcome, value, text = message
        if outcome == "ok":
            stand_in: BaseException = RuntimeError(
                f"The rank's function returned {type(value).__name__}, which cannot be pickled back to the "
                f"calling process: {problem}"
            )
            return pickle.dumps(("error", stand_in, ""))
        stand_in = RuntimeError(f"{type(value).__name__}: {value} (the exception itself could not be pickled)")
        return pickle.dumps(("error", stand_in, text))


def rank_variables(rank: int, world_size: int, port: int) -> dict[str, str]:
    """torchrun's environment variables for rank ``rank`` of ranks on this machine meeting at ``port``."""
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world_size), "LOCAL_WORLD_SIZE": str(world_size), "GROUP_RANK": "0", "NODE_RANK": "0"}


def _die_with_parent(parent_pid: int | None) -> None:
    die_with_parent()
    if parent_pid is not None and os.getppid() != parent_pid:  # the parent died before the line above took effect
        os._exit(1)
