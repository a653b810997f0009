"""``framework launch --max-restarts``: every rank starts again when one is lost or stuck, through a new rendezvous
each time, until the restarts are spent; preemption signals sent to the launcher reach the ranks. (An exception in
the script is not retried: tests/trainer/test_restarts.py.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from framework.cli.launch_restarts import FAILED, LOST, PREEMPTED, classify, describe_failure, signal_of
from framework.runtime.preemption_signals import REQUEUE_EXIT_CODE

ROOT = Path(__file__).parents[2]
PROBE = str(ROOT / "tests" / "cli" / "restart_probe.py")


def _launch(out: Path, restarts: int, **environment: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "framework", "launch", "--nproc-per-node", "2", "--max-restarts",
                             str(restarts), PROBE, str(out)], cwd=ROOT, env={**os.environ, **environment},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _lines(out: Path) -> list[str]:
    return out.read_text().splitlines() if out.exists() else []


def test_a_rank_lost_again_and_again_is_restarted_each_time_through_a_new_rendezvous_until_restarts_are_spent(
        tmp_path):
    """Rank 1 is killed in every attempt: three restarts, each through a new rendezvous, then the launch ends.
    Three, not more: torchrun's own restarts, which kept the first store, failed to connect about half of them
    (see framework.cli.launch_restarts), so three in a row would pass with that bug back one time in eight, and the
    suite's other launches restart through the same launcher five more times (the stuck-rank launch below, the
    killed rank and the fault soak of tests/trainer/test_restarts.py), each time going on to end as the run
    never interrupted. A launch that also spends its restarts shows where they end in the same attempts."""
    out = tmp_path / "attempts"
    launcher = _launch(out, restarts=3, PROBE_KILLS="4")
    _, errors = launcher.communicate(timeout=180)
    assert launcher.returncode == 1, errors[-3000:]
    # every attempt: both ranks joined and all-reduced (a failed rendezvous would end the launch or lose a line)
    seen = sorted(line.split() for line in _lines(out))
    assert [fields[:3] for fields in seen] == sorted([str(attempt), str(rank), "2"] for attempt in range(4)
                                                     for rank in (0, 1))
    # torchrun's own variables as its restarts set them: the attempt, the limit, one run id for the whole job
    assert all(fields[3:5] == [fields[0], "3"] for fields in seen)
    assert len({fields[5] for fields in seen}) == 1
    for attempt in range(1, 4):
        assert f"rank 1 was killed by SIGKILL; starting all ranks again (restart {attempt} of 3)" in errors
    assert "rank 1 was killed by SIGKILL; no restart left (--max-restarts 3)." in errors


def test_the_launchers_options_are_checked_before_anything_starts(tmp_path):
    done = subprocess.run([sys.executable, "-m", "framework", "launch", "--max-restarts", "-1", PROBE, str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--max-restarts" in done.stderr and "-1" in done.stderr, done.stderr
    assert not list(tmp_path.iterdir())  # the script never ran


# An exception in the script, not retried and failing the job once with its traceback: in
# tests/trainer/test_restarts.py, raised in a Trainer's rank.


@pytest.mark.parametrize("name", ["SIGUSR1", "SIGTERM"])
def test_a_preemption_signal_to_the_launcher_reaches_every_rank_and_asks_for_a_requeue(tmp_path, name):
    out = tmp_path / "attempts"
    launcher = _launch(out, restarts=2, PROBE_MODE="signal")
    deadline = time.monotonic() + 60
    while len(_lines(out)) < 2:
        assert time.monotonic() < deadline and launcher.poll() is None, launcher.stderr.read()[-3000:]
        time.sleep(0.1)
    launcher.send_signal(getattr(signal, name))
    _, errors = launcher.communicate(timeout=60)
    assert launcher.returncode == REQUEUE_EXIT_CODE, errors[-3000:]
    assert sorted(line for line in _lines(out) if line.startswith("signalled")) == [
        f"signalled 0 {name}", f"signalled 1 {name}"]
    assert f"{name} received and passed on to the ranks" in errors
    assert "starting all ranks again" not in errors  # the job is going away: the scheduler starts it again


def test_the_exit_codes_of_the_failed_ranks_decide_what_is_retried():
    assert classify({1: -signal.SIGKILL, 0: 1}) == LOST  # a rank that loses its peer fails too
    assert classify({0: 128 + signal.SIGSEGV}) == LOST  # a signal seen through a shell
    assert classify({0: 1}) == FAILED
    assert classify({1: -signal.SIGABRT, 0: 1}) == FAILED  # gloo's abort at the exit of a rank that raised
    assert classify({1: 1, 0: -signal.SIGTERM}) == FAILED  # the agent stopped rank 0 after rank 1 raised
    assert classify({1: REQUEUE_EXIT_CODE, 0: -signal.SIGTERM}) == PREEMPTED
    assert signal_of(2) is None and signal_of(-9) == signal.SIGKILL
    assert describe_failure({0: 1, 1: -9}) == "rank 1 was killed by SIGKILL"
    assert describe_failure({1: 3}) == "rank 1 exited with status 3"


def test_a_stuck_rank_ends_the_attempt_at_the_timeout_named_and_the_launcher_starts_every_rank_again(tmp_path):
    """Both ways of being stuck in one launch, one attempt each: stopped (its beat goes stale), then in an endless
    loop (it beats, from a thread that also says where its main thread is); the third attempt trains to the end.
    Each restart is timed from the moment rank 1 got stuck to the next attempt's rank 0 having started."""
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "w") as stdout, open(err, "w") as stderr:  # files: nothing has to read a pipe while it waits
        launcher = subprocess.Popen([sys.executable, "-m", "framework", "launch", "--nproc-per-node", "2",
                                     "--max-restarts", "2", "--shutdown-timeout", "2",
                                     str(ROOT / "tests" / "cli" / "stuck_rank.py"), "stop", "loop"],
                                    cwd=ROOT, stdout=stdout, stderr=stderr, text=True)
        try:
            launcher.wait(timeout=180)
        finally:
            if launcher.poll() is None:
                launcher.kill()
                launcher.wait()
    output, errors = out.read_text(), err.read_text()
    assert launcher.returncode == 0, errors[-3000:]
    assert "done 5" in output
    stop = errors.index("collective timed out waiting; not heard from since: rank 1")
    loop = re.search(r"collective timed out waiting; alive but not in a collective: rank 1 \(stuck_rank\.py:\d+ in "
                     r"training_step\): an endless loop", errors)
    assert loop and stop < loop.start(), errors[-3000:]
    assert errors.count("Killed rank(s) 1 on this machine") == 2
    assert errors.index("rank 1 was killed by SIGKILL; starting all ranks again (restart 1 of 2)") < loop.start()
    assert "rank 1 was killed by SIGKILL; starting all ranks again (restart 2 of 2)" in errors[loop.start():]
    times = {(word, int(attempt)): float(at) for word, attempt, at in re.findall(r"^(stuck|started) (\d) (\S+)$",
                                                                                   output, re.MULTILINE)}
    for attempt in (0, 1):
        # the 5 s timeout, the 2 s shutdown and the new ranks' start: not torch's 30 minutes, nor its agent's 30 s
        assert times["started", attempt + 1] - times["stuck", attempt] < 30, times
