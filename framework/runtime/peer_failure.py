"""Which rank failed first, told to every node of a torchrun run, whose other nodes then stop their ranks.

torchrun's agents meet in a c10d TCPStore (with ``--master-addr``, the one node 0's launcher holds at
MASTER_ADDR:MASTER_PORT), and the ranks they start reach the same store. Left alone, a rank that fails on one
node gives the other nodes a bare "Connection closed by peer", or nothing at all where they wait for it outside a
collective (joining the process group), until the 30-minute timeout. So:

- a rank that dies of an exception writes it in the store (the first one is kept), and a rank whose collective
  failed because a peer went away adds that first failure to its own error (``share_failures_with_peers``);
- ``framework launch`` on each of several nodes watches the store (``NodeWatch``): a node whose ranks failed
  says so there, the other nodes stop their ranks, and every launcher prints which rank failed first, and why.

Nothing here runs in the training step: a rank touches the store from its heartbeat's thread, and when it dies; the
launchers poll the store from a thread of their own.

torchrun's agent stops the ranks left after one failed with SIGTERM, which a Trainer's rank takes as a preemption
wish (save, then leave). With a peer gone no checkpoint can be saved, since every rank takes part, so the heartbeat
ends such a rank at once (``leave_if_unanswerable``), as SIGTERM would without the wish; otherwise the launcher would
wait for it until its ``--shutdown-timeout`` (30 s), or a collective's timeout on NCCL.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from framework.runtime.heartbeat import (
    INTERVAL_S,
    busy_ranks,
    end_ranks_here,
    gone_ranks,
    process_ended,
    silent_ranks,
    start_heartbeat,
)
from framework.runtime.preemption_signals import unanswered_signal
from framework.strategies.group_exit import ranks_that_left

FIRST_FAILURE_KEY = "framework/first_failure"  # a RankFailure, as JSON: the first rank that died of an exception
FAILED_NODE_KEY = "framework/failed_node"  # set by the first launcher whose ranks failed: the others stop theirs
LAUNCHERS_DONE_KEY = "framework/launchers_done"  # how many launchers have ended

_RANK_CONNECT_S = 5.0  # a dying rank's wait for the store, which may have gone with its node
_RECORD_WAIT_S = 2.0  # a rank that lost a peer waits this long for the peer's record (none if it was killed)
_POLL_S = 0.5  # how often a launcher looks for another node's failure
_RANKS_GRACE_S = 3.0  # how long a launcher lets its ranks end by themselves once another node failed
_JOIN_WAIT_S = 900.0  # how long a launcher waits for the store to come up (torchrun's rendezvous join timeout)
_KEEP_STORE_S = 15.0  # how long a failed launcher keeps the store (node 0's) up for the others to read it
_GONE_ELSEWHERE_S = 15.0  # a rank on another machine not heard from for this long is taken as gone


@dataclass(frozen=True)
class RankFailure:
    """What a rank died of: ``error`` is its exception in one line, ``traceback`` the text Python printed."""

    rank: int
    world_size: int
    node_rank: int
    error: str
    traceback: str

    def summary(self) -> str:
        """``"Rank 3 of 4 (node 1) failed first, with ValueError: boom"``."""
        return f"Rank {self.rank} of {self.world_size} (node {self.node_rank}) failed first, with {self.error}"


def open_store(address: str, port: int, timeout_s: float) -> Any | None:
    """A client of the TCPStore at ``address:port``, or None when none answers within ``timeout_s`` seconds."""
    from torch.distributed import TCPStore

    try:
        # wait_for_workers=False: not counted among the agents torchrun's store waits for
        return TCPStore(address, port, is_master=False, timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
    except RuntimeError:  # torch's DistNetworkError and DistStoreError
        return None


def first_failure(store: Any) -> RankFailure | None:
    """The record of the first rank of the run that died of an exception, if one did."""
    if not store.check([FIRST_FAILURE_KEY]):
        return None
    return RankFailure(**json.loads(store.get(FIRST_FAILURE_KEY)))


# -- in the ranks ---------------------------------------------------------------------------------------------

_hook_installed = False  # one excepthook per process, however many Runtimes attach


def share_failures_with_peers() -> None:
    """In a rank torchrun started (``framework launch``) or ``srun`` started: if this process dies of an exception,
    write it in the store the ranks share, for the other ranks and launchers to name; if it dies because a
    collective lost a peer, name the rank that left or failed first beside its own error. Installed as
    ``sys.excepthook`` (around the one in place), so nothing runs until the rank fails; elsewhere, and a second
    time, it does nothing. Under torchrun each rank's heartbeat starts too (its store is up before the ranks)."""
    global _hook_installed
    torchrun = "TORCHELASTIC_RUN_ID" in os.environ
    if _hook_installed or not (torchrun or "SLURM_PROCID" in os.environ and "RANK" not in os.environ):
        return
    _hook_installed = True
    beats = open_store(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), _RANK_CONNECT_S) if torchrun \
        else None
    if beats is not None:
        rank, world_size, _ = _identity()
        start_heartbeat(beats, rank, each_beat=lambda: leave_if_unanswerable(beats, rank, world_size))
    previous = sys.excepthook

    def share_then_print(kind: type[BaseException], error: BaseException, trace: Any) -> None:
        try:
            _share_or_explain(error, "".join(traceback.format_exception(kind, error, trace)))
        except Exception:  # the store may be gone with its node: this rank's own error must still be printed
            pass
        previous(kind, error, trace)

    sys.excepthook = share_then_print


def leave_if_unanswerable(store: Any, rank: int, world_size: int) -> None:
    """End this process (exit status 128 + the signal) if it received a preemption signal it has not begun to answer
    while another rank is gone: see the module's docstring."""
    number = unanswered_signal()
    if number is None:
        return
    gone = [other for other in gone_ranks(store, world_size, _GONE_ELSEWHERE_S) if other != rank]
    if not gone:
        return
    names = ", ".join(f"rank {other}" for other in gone)
    message = (f"[framework] rank {rank}: {signal.Signals(number).name} received while {names} "
               f"{'is' if len(gone) == 1 else 'are'} gone; a preemption checkpoint needs every rank, so this rank "
               "ends now, as the signal would end it without the Trainer.\n")
    os.write(2, message.encode())  # from this thread: the main thread may hold sys.stderr's lock
    os._exit(128 + number)


def _share_or_explain(error: BaseException, text: str) -> None:
    from framework.runtime.worker_processes import lost_a_peer

    store = open_store(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), _RANK_CONNECT_S)
    if store is None:
        return
    rank, world_size, node_rank = _identity()
    if _timed_out(error):
        _name_ranks_keeping_it_waiting(error, store)
        return
    if not lost_a_peer(error):
        # The process's connections close only after this hook: the record is there before any peer notices.
        failure = RankFailure(rank, world_size, node_rank,
                              f"{type(error).__name__}: {error}", text)
        store.compare_set(FIRST_FAILURE_KEY, "", json.dumps(asdict(failure)))
        return
    left = _left_before(rank, world_size)
    if left:
        _add_note(error, f"[framework] {left}, while this rank waited for it in a collective; this rank's collective "
                         "lost its connection to it. (Do the ranks take different paths through the code?)")
        return
    # A rank that raised wrote its record before its connections closed; one killed (or gone by os._exit) wrote
    # none, and its process is gone; one on another machine may still be writing its record.
    first = first_failure(store)
    gone = [other for other in gone_ranks(store, world_size, _GONE_ELSEWHERE_S) if other != rank]
    if first is None and gone:
        names = ", ".join(f"rank {other}" for other in gone)
        _add_note(error, f"[framework] The process of {names} had ended (killed by a signal, or os._exit) while this "
                         "rank waited for it in a collective; the launcher's report gives its exit status.")
        return
    first = first or _wait_for_first_failure(store)
    if first is not None and first.rank != rank:
        _add_note(error, f"[framework] {first.summary()}; this rank's collective lost its connection to it.")


def _identity() -> tuple[int, int, int]:
    """This rank, the world size and this node's rank, as torchrun (or else srun) set them."""
    if "RANK" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("GROUP_RANK", "0"))
    return int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"]), int(os.environ.get("SLURM_NODEID", "0"))


def _left_before(rank: int, world_size: int) -> str:
    """``"Rank 1 reached its end (sys.exit, or the end of its script) 5.0 s before"`` for the other ranks that
    left the process group at their end (``strategies.group_exit``), or ""."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return ""
    try:
        left = ranks_that_left(dist.distributed_c10d._get_default_store(), world_size)
    except RuntimeError:  # the store went with the rank that held it
        return ""
    now = time.time()
    return "; ".join(f"Rank {other} reached its end (sys.exit, or the end of its script) {now - stamp:.1f} s before"
                     for other, (stamp, _, _) in sorted(left.items()) if other != rank)


def _timed_out(error: BaseException) -> bool:
    """Whether ``error`` is a collective that waited its whole timeout (``DDPStrategy(timeout=...)``) for a peer."""
    text = str(error).lower()  # gloo says "Timed out waiting ...", or "Application timeout caused pair closure"
    return isinstance(error, RuntimeError) and ("timed out" in text or "timeout" in text)


def _name_ranks_keeping_it_waiting(error: BaseException, store: Any) -> None:
    rank, world_size, _ = _identity()
    silent = silent_ranks(store, world_size, older_than_s=3 * INTERVAL_S)
    busy = {other: beat for other, beat in busy_ranks(store, world_size, 3 * INTERVAL_S).items() if other != rank}
    if silent:
        names = ", ".join(f"rank {other} ({beat.age:.0f} s)" for other, beat in sorted(silent.items()))
        why, culprits = f"not heard from since: {names}: stopped (SIGSTOP), frozen, or its machine gone.", silent
    elif busy:
        names = ", ".join(f"rank {other} ({beat.busy_at})" for other, beat in sorted(busy.items()))
        why, culprits = (f"alive but not in a collective: {names}: an endless loop, or a wait that does not end?",
                         busy)
    else:
        _add_note(error, "[framework] this rank's collective timed out waiting; every rank is alive and waiting, "
                         "so they wait in different collectives (do the ranks take different paths through the "
                         "code?).")
        return
    ended = end_ranks_here(culprits)
    _add_note(error, f"[framework] this rank's collective timed out waiting; {why}"
                     + (f" Killed rank(s) {', '.join(map(str, ended))} on this machine" if ended else "")
                     + " so that the launcher can end the attempt (and, with --max-restarts, start every rank again).")


def _wait_for_first_failure(store: Any) -> RankFailure | None:
    deadline = time.monotonic() + _RECORD_WAIT_S
    while (failure := first_failure(store)) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    return failure


def _add_note(error: BaseException, note: str) -> None:
    if hasattr(error, "add_note"):  # Python 3.11+: printed under the traceback
        error.add_note(note)
    else:
        print(note, file=sys.stderr, flush=True)


# -- in the launchers -----------------------------------------------------------------------------------------

class NodeWatch:
    """``framework launch`` on one node of several: stops this node's ranks when another node's ranks fail, tells
    the other nodes when this node's fail, and prints the run's first failure.

    Example::

        watch = NodeWatch("10.0.0.1", 29500, nodes=2, node_rank=1)
        watch.start()
        try:
            run(torchrun_arguments)
        except ChildFailedError:
            watch.report_failure({3: 1})   # rank 3 exited with code 1
        finally:
            watch.finish()

    ``node_rank``: this node's, where the launcher knows it (None: assigned at the rendezvous); ``hosts_store``:
    whether this launcher holds the store (node 0's, under torchrun's static rendezvous).
    """

    def __init__(self, address: str, port: int, nodes: int, node_rank: int | None = None,
                 hosts_store: bool = False) -> None:
        self.address, self.port, self.nodes, self.node_rank = address, port, nodes, node_rank
        self.hosts_store = hosts_store
        self._me = f"{socket.gethostname()}:{os.getpid()}"  # node ranks may be assigned late (c10d rendezvous)
        self._store: Any = None
        self._connected = threading.Event()
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="framework-node-watch", daemon=True)

    def start(self) -> None:
        """Start watching. Call it before torchrun's agent starts: a launcher that hosts the store starts its
        server here, and the agent shares it (torchrun makes it multi-tenant), so the server outlives the agent
        while the other nodes read what failed. The others connect in the background (node 0 may start later)."""
        self._store = _host_store(self.address, self.port) if self.hosts_store else None
        if self._store is not None:
            self._connected.set()
        self._thread.start()

    def _watch(self) -> None:
        if not self._connected.is_set():
            self._store = open_store(self.address, self.port, _JOIN_WAIT_S)
            self._connected.set()
        while self._store is not None and not self._ended.wait(_POLL_S):
            try:
                failed = self._store.check([FAILED_NODE_KEY]) and json.loads(self._store.get(FAILED_NODE_KEY))
            except RuntimeError:  # the store went with node 0's launcher: nothing left to watch
                return
            if failed and failed["launcher"] != self._me:
                self._stop_this_node(failed["rank"])
                return

    def _stop_this_node(self, rank: int) -> None:
        print(f"[framework launch] Rank {rank} on another node failed: stopping this node's ranks.",
              file=sys.stderr, flush=True)
        # Ranks whose collective lost the failed one get a moment to end by themselves, printing why.
        deadline = time.monotonic() + _RANKS_GRACE_S
        while (ranks := _running_children()) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if ranks or self._ended.wait(_RANKS_GRACE_S):
            return  # torchrun's agent sees its ranks fail and ends the launch, as after any failure
        # No rank left, and the launch goes on: torchrun's agent waits for the failed node in a store call that no
        # signal interrupts (its exit barrier, 5 minutes; its rendezvous). End it from here.
        self.report_failure({})
        self.finish()
        sys.stdout.flush()
        os._exit(1)

    def _stopped_store(self) -> Any:
        """The store, once the watching thread has stopped (one thread at a time uses it); None without one."""
        self._connected.wait(_KEEP_STORE_S)
        self._ended.set()
        if self._thread is not threading.current_thread():
            self._thread.join(_POLL_S + _KEEP_STORE_S)
        return self._store

    def report_failure(self, exit_codes: dict[int, int]) -> None:
        """This node's ranks failed (``exit_codes``: global rank -> exit code, the first to fail first): tell the
        other nodes, whose launchers stop their ranks, and print the run's first failure (maybe another node's)."""
        store = self._stopped_store()
        if store is None:
            return
        try:
            if exit_codes:
                rank = next(iter(exit_codes))
                record = {"launcher": self._me, "rank": rank, "exitcode": exit_codes[rank]}
                store.compare_set(FAILED_NODE_KEY, "", json.dumps(record))
            print(self._first_failure_text(store), file=sys.stderr, flush=True)
        except RuntimeError:  # the store went with node 0's launcher
            pass

    def _first_failure_text(self, store: Any) -> str:
        failure = first_failure(store)
        if failure is not None:
            text = f"[framework launch] {failure.summary()}."
            if failure.node_rank != self.node_rank:  # this node's output shows it already
                text += " Its traceback:\n" + "".join(f"    {line}\n" for line in failure.traceback.splitlines())
            return text
        failed = json.loads(store.get(FAILED_NODE_KEY))
        return (f"[framework launch] Rank {failed['rank']} failed first: it {_exit_description(failed['exitcode'])} "
                "(its own output is in its node's log).")

    def finish(self) -> None:
        """The launch ended. A launcher that holds the store waits (a few seconds at most) until every other
        launcher has ended too, so that they can read what failed until they are done."""
        store = self._stopped_store()
        if store is None:
            return
        try:
            ended = store.add(LAUNCHERS_DONE_KEY, 1)
            deadline = time.monotonic() + _KEEP_STORE_S
            while self.hosts_store and ended < self.nodes and time.monotonic() < deadline:
                time.sleep(_POLL_S)
                ended = store.add(LAUNCHERS_DONE_KEY, 0)
        except RuntimeError:  # the store went with node 0's launcher
            pass


def _host_store(address: str, port: int) -> Any | None:
    """The server of the store torchrun's static rendezvous opens at ``address:port``, multi-tenant as torchrun
    opens it, so that its agent shares this server; None where that fails (the agent will say why)."""
    from torch.distributed import TCPStore

    try:
        return TCPStore(address, port, is_master=True, wait_for_workers=False, multi_tenant=True)
    except RuntimeError:
        return None


def _exit_description(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _running_children() -> list[int]:
    """The processes this one started that still run (torchrun's agent starts the ranks so), on Linux; else []."""
    pids: list[int] = []
    for task in os.listdir(f"/proc/{os.getpid()}/task") if os.path.isdir("/proc") else ():
        try:
            with open(f"/proc/{os.getpid()}/task/{task}/children") as children:
                pids.extend(int(pid) for pid in children.read().split())
        except OSError:
            continue
    return [pid for pid in pids if not process_ended(pid)]
