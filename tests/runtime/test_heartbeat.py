"""What a rank's heartbeat tells the others: which ranks are silent, busy outside a collective, or gone."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta

from torch.distributed import TCPStore

from framework.runtime import heartbeat
from framework.runtime.worker_processes import free_port


def _store() -> TCPStore:
    return TCPStore("127.0.0.1", free_port(), is_master=True, timeout=timedelta(seconds=10), wait_for_workers=False)


def _beat(store: TCPStore, rank: int, age_s: float, pid: int, where: str = "-", host: str = "") -> None:
    store.set(f"framework/alive/{rank}", f"{time.time() - age_s!r} {host or socket.gethostname()} {pid} {where}")


def test_ranks_are_told_apart_as_silent_busy_waiting_or_gone():
    store = _store()
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    _beat(store, 0, 0.1, os.getpid())                                      # waiting in a collective
    _beat(store, 1, 0.2, os.getpid(), "train.py:12 in training_step")      # busy, in a loop of its own
    _beat(store, 2, 9.0, os.getpid())                                      # silent: stopped, frozen
    _beat(store, 3, 0.3, ended.pid)                                        # its process ended, on this machine
    _beat(store, 4, 4.0, 1, host="another-machine")                        # elsewhere: heard from 4 s ago
    assert sorted(heartbeat.silent_ranks(store, 6, older_than_s=3.0)) == [2, 4]
    assert {rank: beat.busy_at for rank, beat in heartbeat.busy_ranks(store, 6, 3.0).items()} == {
        1: "train.py:12 in training_step"}
    assert heartbeat.gone_ranks(store, 6, elsewhere_after_s=15.0) == [3]
    assert heartbeat.gone_ranks(store, 6, elsewhere_after_s=2.0) == [3, 4]


def test_a_main_thread_counts_as_waiting_only_inside_torch_distributed_autograd_or_the_strategies():
    release = threading.Event()
    # a function whose code lives where torch.distributed's does: what a rank blocked in a collective runs
    namespace: dict = {}
    source = "import time\ndef collective(event):\n    while not event.is_set():\n        time.sleep(0.01)\n"
    exec(compile(source, os.path.join("site-packages", "torch", "distributed", "distributed_c10d.py"), "exec"),
         namespace)

    done = []

    def own_loop(event):
        while not done:
            pass

    try:
        for target, expected in ((namespace["collective"], ""), (own_loop, "own_loop")):
            worker = threading.Thread(target=target, args=(release,), daemon=True)
            worker.start()
            time.sleep(0.05)
            where = heartbeat._where(worker.ident)
            assert where.endswith(f" in {expected}") if expected else where == "", where
            assert not expected or where.startswith("test_heartbeat.py:"), where
    finally:
        release.set()
        done.append(True)


_ENDS_WHILE_BEATING = """
import time
from datetime import timedelta
from torch.distributed import TCPStore
from framework.runtime import heartbeat

server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
client = TCPStore("127.0.0.1", server.port, is_master=False, timeout=timedelta(seconds=10))

def busy_beat():  # store calls back to back for a while, as a beat under a loaded machine can take
    until = time.monotonic() + 0.5
    while time.monotonic() < until:
        client.set("framework/busy", "x" * 1000)

heartbeat.start_heartbeat(client, 0, each_beat=busy_beat)
time.sleep(0.1)
print("script ends")
"""


def test_a_process_that_ends_while_its_heartbeat_is_in_a_store_call_exits_cleanly():
    # torch aborts a process whose daemon thread is inside a store call as the interpreter finalizes: the rank
    # finished its work, and its launcher saw status -6 and failed the job.
    ended = subprocess.run([sys.executable, "-c", _ENDS_WHILE_BEATING], capture_output=True, text=True, timeout=60)
    assert (ended.returncode, ended.stdout) == (0, "script ends\n"), ended.stderr[-2000:]
    assert "terminate called" not in ended.stderr
