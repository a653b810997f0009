"""The suite's test ids are the same in every process, so `pytest -n 2` (pytest-xdist) can share the suite out."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pytest(*arguments: str, hash_seed: str = "0") -> subprocess.Popen:
    environment = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *arguments], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)


def _finish(process: subprocess.Popen) -> tuple[int, str, str]:
    try:
        stdout, stderr = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return process.returncode, stdout, stderr


def test_test_ids_are_the_same_in_every_process_and_xdist_workers_agree():
    # the three runs are independent: started together, they overlap their imports and collection
    collections = [_pytest("--collect-only", "-q", "tests", hash_seed=seed) for seed in ("1", "2")]
    # -n 2 starts, and each worker collects the whole suite without an error (-k deselects every test before xdist
    # compares the workers' lists, so the comparison of whole lists is the one across hash seeds below)
    shared = _pytest("-n", "2", "-q", "-k", "no_test_is_named_like_this", "tests")
    try:
        ids, again = ([line for line in _finish(process)[1].splitlines() if "::" in line] for process in collections)
        status, stdout, stderr = _finish(shared)
    finally:
        for process in (*collections, shared):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert len(ids) > 800 and ids == again
    assert not [test_id for test_id in ids if re.search(r"0x[0-9a-f]{6,}", test_id)]  # an address differs by process
    assert status == 5, stdout + stderr  # 5: collected the same, ran none
