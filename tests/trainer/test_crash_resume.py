"""A real crash: a training process killed with SIGKILL, in training and in the middle of a save.

Resuming from ``last`` each time, the run must end with the weights of a run never killed, and
every checkpoint file left in the directory must load.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from framework.io.checkpoint_storage import load_checkpoint
from framework.io.fs import leftover_temporaries

ROOT = Path(__file__).parents[2]

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")


def _start(dirpath: Path, result: Path, log: Path) -> subprocess.Popen:
    with open(log, "a") as stderr:
        return subprocess.Popen([sys.executable, "-m", "tests.trainer.crash_run", str(dirpath), str(result)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True)


def _wait_for(process: subprocess.Popen, line: str, count: int = 1) -> bool:
    """Read the child's output until ``line`` has come ``count`` times; False if it ended first."""
    for received in process.stdout:
        if received.strip() == line:
            count -= 1
            if count == 0:
                return True
    return False


def _wait_for_a_file_being_written(dirpath: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not leftover_temporaries(dirpath):
        assert time.monotonic() < deadline, "no checkpoint write started"


def _run_to_the_end(dirpath: Path, result: Path, log: Path) -> dict:
    process = _start(dirpath, result, log)
    process.stdout.read()
    assert process.wait(timeout=120) == 0, log.read_text()[-3000:]
    return torch.load(result, weights_only=True)


def _loadable_checkpoints(dirpath: Path) -> list[str]:
    """The checkpoint files in ``dirpath``, each loaded once (a truncated or corrupted one raises)."""
    names = sorted(name for name in os.listdir(dirpath) if name.endswith(".ckpt"))
    for name in names:
        load_checkpoint(dirpath / name)
    return names


def test_a_run_killed_again_and_again_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path):
    log = tmp_path / "stderr.log"
    expected = _run_to_the_end(tmp_path / "uninterrupted", tmp_path / "expected.pt", log)

    dirpath, chance = tmp_path / "killed", random.Random(0)
    kills = [("save", 1), ("training", chance.uniform(0.05, 0.3)), ("save", 2), ("training", chance.uniform(0.05, 0.3))]
    unfinished_writes = 0
    for where, when in kills:
        process = _start(dirpath, tmp_path / "unused.pt", log)
        if where == "save":
            assert _wait_for(process, "saving", count=when), "the run ended before the save it was to be killed in"
            _wait_for_a_file_being_written(dirpath)
        else:
            assert _wait_for(process, "started")
            time.sleep(when)
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=60) == -signal.SIGKILL
        process.stdout.close()
        unfinished_writes += len(leftover_temporaries(dirpath))
        _loadable_checkpoints(dirpath)
    assert unfinished_writes > 0  # some kill did land in the middle of writing a file

    resumed = _run_to_the_end(dirpath, tmp_path / "resumed.pt", log)
    assert resumed.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(resumed[key], value), key
    assert "last.ckpt" in _loadable_checkpoints(dirpath)
    assert leftover_temporaries(dirpath) == []  # the resumed run cleared what the killed saves left
