"""``framework launch --max-restarts``: every rank starts again when one is lost, through a new rendezvous each
time; an exception in the script is not retried; preemption signals sent to the launcher reach the ranks."""

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


def test_a_rank_lost_eight_times_in_a_row_is_restarted_each_time_through_a_new_rendezvous(tmp_path):
    out = tmp_path / "attempts"
    launcher = _launch(out, restarts=8, PROBE_KILLS="8")
    _, errors = launcher.communicate(timeout=240)
    assert launcher.returncode == 0, errors[-3000:]
    # every attempt: both ranks joined and all-reduced (a failed rendezvous would end the launch or lose a line)
    seen = sorted(line.split() for line in _lines(out))
    assert [fields[:3] for fields in seen] == sorted([str(attempt), str(rank), "2"] for attempt in range(9)
                                                     for rank in (0, 1))
    # torchrun's own variables as its restarts set them: the attempt, the limit, one run id for the whole job
    assert all(fields[3:5] == [fields[0], "8"] for fields in seen)
    assert len({fields[5] for fields in seen}) == 1
    for attempt in range(1, 9):
        assert f"rank 1 was killed by SIGKILL; starting all ranks again (restart {attempt} of 8)" in errors


def test_the_launchers_options_are_checked_before_anything_starts(tmp_path):
    done = subprocess.run([sys.executable, "-m", "framework", "launch", "--max-restarts", "-1", PROBE, str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--max-restarts" in done.stderr and "-1" in done.stderr, done.stderr
    assert not list(tmp_path.iterdir())  # the script never ran


def test_restarts_end_when_they_are_spent(tmp_path):
    out = tmp_path / "attempts"
    launcher = _launch(out, restarts=1, PROBE_KILLS="5")
    _, errors = launcher.communicate(timeout=120)
    assert launcher.returncode == 1
    assert {line.split()[0] for line in _lines(out)} == {"0", "1"}
    assert "rank 1 was killed by SIGKILL; no restart left (--max-restarts 1)." in errors


def test_an_exception_in_the_script_fails_the_job_once_with_its_traceback(tmp_path):
    out = tmp_path / "attempts"
    launcher = _launch(out, restarts=3, PROBE_MODE="raise")
    _, errors = launcher.communicate(timeout=120)
    assert launcher.returncode == 1
    assert {line.split()[0] for line in _lines(out)} == {"0"}  # one attempt only
    assert "ValueError: a bug in the script" in errors
    assert "starting all ranks again" not in errors


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


STUCK = ("stop", "loop")


@pytest.fixture(scope="module")
def stuck_launches(tmp_path_factory):
    """Both launches, started together: each spends most of its time waiting for its 5-s collective timeout, so
    the two waits overlap instead of adding up. Their output goes to files: a pipe nobody reads while the test of
    the other launch runs could fill and block a launcher."""
    script = str(ROOT / "tests" / "cli" / "stuck_rank.py")
    folder = tmp_path_factory.mktemp("stuck")
    started = time.monotonic()
    launchers = {}
    for stuck in STUCK:
        with open(folder / f"{stuck}.out", "w") as stdout, open(folder / f"{stuck}.err", "w") as stderr:
            launchers[stuck] = subprocess.Popen([sys.executable, "-m", "framework", "launch", "--nproc-per-node", "2",
                                                 "--max-restarts", "1", "--shutdown-timeout", "2", script, stuck],
                                                cwd=ROOT, stdout=stdout, stderr=stderr, text=True)
    yield started, launchers, folder
    for launcher in launchers.values():
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


@pytest.mark.parametrize("stuck", STUCK)
def test_a_stuck_rank_ends_the_attempt_at_the_timeout_named_and_the_launcher_starts_every_rank_again(
        stuck_launches, stuck):
    started, launchers, folder = stuck_launches
    launchers[stuck].wait(timeout=180)
    done = subprocess.CompletedProcess(launchers[stuck].args, launchers[stuck].returncode,
                                       (folder / f"{stuck}.out").read_text(), (folder / f"{stuck}.err").read_text())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "done 5" in done.stdout
    if stuck == "stop":  # its beat goes stale
        assert "collective timed out waiting; not heard from since: rank 1" in done.stderr
    else:  # it beats, from a thread that also says where its main thread is
        assert re.search(r"collective timed out waiting; alive but not in a collective: rank 1 \(stuck_rank\.py:\d+ in "
                         r"training_step\): an endless loop", done.stderr), done.stderr[-3000:]
    assert "Killed rank(s) 1 on this machine" in done.stderr
    assert "rank 1 was killed by SIGKILL; starting all ranks again (restart 1 of 1)" in done.stderr
    assert time.monotonic() - started < 60  # the 5 s timeout, not torch's 30 minutes, nor its agent's 30 s wait
