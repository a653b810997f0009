"""The preemption watch: a signal counts from the moment it arrives, even while the main thread is in a long C call
and Python has not run the handler yet, and it is not lost when an error ends the loop first."""

from __future__ import annotations

import signal
import threading
import time
from datetime import timedelta

import pytest
from torch.distributed import TCPStore

from framework.runtime import preemption_signals as preemption
from framework.runtime.preemption_signals import PreemptionWatch, unanswered_signal
from framework.runtime.worker_processes import free_port


def _wait_in_c(seconds: float) -> None:
    """Block in a C++ call that does not run Python's signal handlers (as a collective or a backward does)."""
    store = TCPStore("127.0.0.1", free_port(), is_master=True, wait_for_workers=False)
    store.wait(["never set"], timedelta(seconds=seconds))


def test_a_signal_counts_while_the_main_thread_is_in_c_and_outlives_an_error_that_ends_the_loop(monkeypatch):
    monkeypatch.setattr(preemption, "_unanswered_at_error", None)
    seen_in_c = []
    previous = signal.signal(signal.SIGUSR2, lambda number, frame: None)  # the program's own handler
    watch = PreemptionWatch()
    try:
        assert watch.install()

        def signal_then_look() -> None:
            time.sleep(0.3)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR2)
            time.sleep(0.3)
            seen_in_c.append(unanswered_signal())  # the main thread is still in its C call

        looker = threading.Thread(target=signal_then_look)
        looker.start()
        with pytest.raises(RuntimeError):  # the wait times out: an error ends the loop before it answered
            try:
                _wait_in_c(1.5)
            finally:
                watch.restore()
        looker.join()
        assert seen_in_c == [signal.SIGUSR2]
        assert unanswered_signal() == signal.SIGUSR2  # kept: the heartbeat still ends the rank if a peer is gone
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_a_signal_answered_or_received_by_a_loop_that_ended_well_is_not_kept(monkeypatch):
    monkeypatch.setattr(preemption, "_unanswered_at_error", None)
    previous = signal.signal(signal.SIGUSR2, lambda number, frame: None)
    try:
        watch = PreemptionWatch()
        watch.install()
        signal.raise_signal(signal.SIGUSR2)
        assert watch.received == signal.SIGUSR2 and unanswered_signal() == signal.SIGUSR2
        watch.answering = True  # the loop saves and leaves
        assert unanswered_signal() is None
        watch.restore()
        assert unanswered_signal() is None
    finally:
        signal.signal(signal.SIGUSR2, previous)
