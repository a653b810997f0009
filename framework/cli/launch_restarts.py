"""``framework launch --max-restarts N`` on one node: start every rank again when one is lost, up to N times.

torchrun restarts ranks itself, but its agent keeps the first attempt's rendezvous store, so the new ranks can
read the old ones' addresses and fail to connect, about half the time on gloo (pytorch #135712). Here each
attempt is a new torchrun agent with a new store (``--max-restarts 0`` to it), and the launcher decides what to
retry:

- a rank killed by a signal (SIGKILL: often the out-of-memory killer; SIGSEGV; a lost node) is retried: all
  ranks start again, and the Trainer resumes from the newest complete checkpoint by itself;
- a rank that exits with ``REQUEUE_EXIT_CODE`` saved a checkpoint on a preemption signal: the launcher exits with
  that status too, for the scheduler to start the job again (it is going away, so no restart here);
- any other failure is an exception in the script (a bug): the job fails once, with its traceback, as without
  restarts.

Two signals do not say "lost": SIGTERM is how torchrun's agent stops the other ranks once one failed (its exit
codes list them too), and SIGABRT is how a gloo rank that ends with an exception often dies on its way out
("terminate called without an active exception").

The ranks of attempt k see ``FRAMEWORK_RESTART_COUNT=k`` and ``FRAMEWORK_RESTART_REASON`` (which rank ended the
attempt before, and how), and torchrun's own variables as its restarts set them (``TORCHELASTIC_RESTART_COUNT=k``,
``TORCHELASTIC_MAX_RESTARTS=N``, one ``TORCHELASTIC_RUN_ID`` for every attempt). On several nodes the launchers
cannot agree on one decision, so there torchrun's own restarts run, each with a fresh store
(``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``), retrying every failure.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

from framework.runtime.preemption_signals import (
    MAX_RESTARTS_VARIABLE,
    PREEMPTION_SIGNALS,
    REQUEUE_EXIT_CODE,
    RESTART_COUNT_VARIABLE,
    RESTART_REASON_VARIABLE,
)

PREEMPTED, LOST, FAILED = "preempted", "lost", "failed"
_NOT_LOST = (None, signal.SIGTERM, signal.SIGABRT)  # see the module's docstring


def run_with_restarts(parsed: argparse.Namespace, run_once: Callable[[argparse.Namespace], dict[int, int]]) -> int:
    """Run ``run_once(parsed)`` (one torchrun attempt; the failed ranks' exit codes, empty when all succeeded) until
    it succeeds, fails in a way not retried, or ``parsed.max_restarts`` restarts are spent. Returns the exit code."""
    restarts, parsed.max_restarts = parsed.max_restarts, 0
    os.environ[MAX_RESTARTS_VARIABLE] = str(restarts)
    first_run_id: dict[str, str] = {}
    for attempt in range(restarts + 1):
        os.environ[RESTART_COUNT_VARIABLE] = str(attempt)
        with counted_as_torchrun(attempt, restarts, first_run_id):
            failures = run_once(parsed)
        if not failures:
            return 0
        verdict = classify(failures)
        if verdict == PREEMPTED:
            return REQUEUE_EXIT_CODE
        reason = describe_failure(failures)
        if verdict == FAILED:
            say_failure(failures)
            return 1
        if attempt == restarts:
            _say(f"{reason}; no restart left (--max-restarts {restarts}).")
            return 1
        _say(f"{reason}; starting all ranks again (restart {attempt + 1} of {restarts}).")
        os.environ[RESTART_REASON_VARIABLE] = reason
    return 1


@contextlib.contextmanager
def counted_as_torchrun(attempt: int, restarts: int, first_run_id: dict[str, str]) -> Iterator[None]:
    """Inside it, the ranks torchrun's agent starts see the variables torchrun's own restarts would give them:
    ``TORCHELASTIC_RESTART_COUNT`` = ``attempt``, ``TORCHELASTIC_MAX_RESTARTS`` = ``restarts``, and the first
    attempt's ``TORCHELASTIC_RUN_ID`` (kept in ``first_run_id``), where each attempt's agent, started with no
    restarts of its own and a new rendezvous, would say 0, 0 and a new id."""
    from torch.distributed.elastic.agent.server import local_elastic_agent as agent

    start_processes = agent.start_processes

    def start_counted(*args: Any, **kwargs: Any) -> Any:
        for environment in kwargs.get("envs", {}).values():
            first_run_id.setdefault("id", environment.get("TORCHELASTIC_RUN_ID", ""))
            environment.update(TORCHELASTIC_RESTART_COUNT=str(attempt), TORCHELASTIC_MAX_RESTARTS=str(restarts),
                               TORCHELASTIC_RUN_ID=first_run_id["id"])
        return start_processes(*args, **kwargs)

    agent.start_processes = start_counted  # the one place the agent hands each rank its environment
    try:
        yield
    finally:
        agent.start_processes = start_processes


def classify(exit_codes: dict[int, int]) -> str:
    """What the failed ranks' exit codes (global rank -> code, the first to fail first) say about the attempt."""
    codes = list(exit_codes.values())
    if REQUEUE_EXIT_CODE in codes:
        return PREEMPTED
    if any(signal_of(code) not in _NOT_LOST for code in codes):
        return LOST
    return FAILED


def signal_of(code: int) -> signal.Signals | None:
    """The signal that ended a process with exit ``code`` (negative from Python, 128+n from a shell), if any."""
    number = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else None
    try:
        return signal.Signals(number) if number is not None else None
    except ValueError:
        return None


def describe_failure(exit_codes: dict[int, int]) -> str:
    """``"rank 1 was killed by SIGKILL"``: the first rank whose end says why the attempt ended (a signal before an
    exit status, since a rank that loses a peer fails too)."""
    by_signal = [(rank, signal_of(code)) for rank, code in exit_codes.items()
                 if signal_of(code) not in _NOT_LOST]
    if by_signal:
        rank, number = by_signal[0]
        return f"rank {rank} was killed by {number.name}"
    rank, code = next(iter(exit_codes.items()))
    return f"rank {rank} exited with status {code}"


def say_failure(exit_codes: dict[int, int]) -> None:
    """Print which rank ended the job, and how (the ranks' own output above says why)."""
    _say(f"{describe_failure(exit_codes)} first, which ended the job; the other ranks were stopped.")


def forward_preemption_signals(parsed: argparse.Namespace) -> None:
    """Have torchrun's agent pass SIGUSR1 and SIGUSR2 on to the ranks as it does SIGTERM (then wait its
    ``--shutdown-timeout`` before it kills them), instead of dying of them and leaving the ranks behind."""
    names = [number.name for number in PREEMPTION_SIGNALS]
    if hasattr(parsed, "signals_to_handle"):  # torchrun's --signals-to-handle (torch 2.8+)
        parsed.signals_to_handle = ",".join(dict.fromkeys([*parsed.signals_to_handle.split(","), *names]))
        return
    handled = os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT").split(",")
    os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = ",".join(dict.fromkeys([*handled, *names]))


def _say(message: str) -> None:
    print(f"framework launch: {message}", file=sys.stderr, flush=True)
