"""Restarts where the Trainer (or the Runtime) starts the ranks itself, as ``framework launch --max-restarts`` does
(``DDPStrategy(max_restarts=N)``): a rank killed by a signal ends the attempt and every rank starts again, up to N
times; an exception raised in a rank is not retried; a preempted rank ends the whole run with its exit status. The
ranks of attempt k see ``FRAMEWORK_RESTART_COUNT=k``, so the Trainer resumes by itself.

- Forked or spawned ranks (``start_with_restarts``): this process starts them again.
- Ranks that run the script again (``become_launcher``): this process becomes ``framework launch`` for the same
  script, since it cannot start itself again as rank 0.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from framework.runtime.preemption_signals import (
    JOB_ID_VARIABLE,
    MAX_RESTARTS_VARIABLE,
    RESTART_COUNT_VARIABLE,
    RESTART_REASON_VARIABLE,
)
from framework.runtime.worker_processes import RankExitedError, start_processes


def start_with_restarts(function: Callable[..., Any], args: Sequence[Any], world_size: int, method: str,
                        environment: dict[str, str], max_restarts: int) -> list[Any]:
    """``start_processes``, started again (all ranks) each time a rank is killed by a signal, ``max_restarts``
    times at most; its results, or the error of the last attempt."""
    reason, job = "", {JOB_ID_VARIABLE: os.environ.get(JOB_ID_VARIABLE) or uuid.uuid4().hex}
    for attempt in range(max_restarts + 1):
        counts = {RESTART_COUNT_VARIABLE: str(attempt), MAX_RESTARTS_VARIABLE: str(max_restarts),
                  RESTART_REASON_VARIABLE: reason} if max_restarts else {}
        counts.update(job)
        try:
            return start_processes(function, args, world_size, method, {**environment, **counts})
        except RankExitedError as error:
            killed = error.exitcode is not None and error.exitcode < 0 and -error.exitcode != signal.SIGABRT
            if attempt == max_restarts or not killed:
                raise
            reason = f"rank {error.rank} was killed by {signal.Signals(-error.exitcode).name}"
            print(f"framework: {reason}; starting all ranks again (restart {attempt + 1} of {max_restarts}).",
                  file=sys.stderr, flush=True)
    raise AssertionError("unreachable")


def become_launcher(world_size: int, max_restarts: int) -> None:
    """With restarts asked for, replace this process with ``framework launch --nproc-per-node <world_size>
    --max-restarts <max_restarts>`` running this script (nothing after this call runs here); without, return."""
    from framework.runtime.relaunch import script_command

    command = script_command()
    if not max_restarts or command is None:
        return
    launcher = [sys.executable, "-m", "framework", "launch", "--nproc-per-node", str(world_size), "--max-restarts",
                str(max_restarts)]
    script = ["-m", *command[2:]] if command[1] == "-m" else command[1:]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [*launcher, *script])
