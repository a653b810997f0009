"""The suite's test ids are the same in every process, so `pytest -n 2` (pytest-xdist) can share the suite out."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pytest(*arguments: str, hash_seed: str = "0") -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *arguments], cwd=ROOT,
                          capture_output=True, text=True, env=environment, timeout=300)


def test_test_ids_are_the_same_in_every_process_and_xdist_workers_agree():
    ids, again = ([line for line in _pytest("--collect-only", "-q", "tests", hash_seed=seed).stdout.splitlines()
                   if "::" in line] for seed in ("1", "2"))
    assert len(ids) > 800 and ids == again
    assert not [test_id for test_id in ids if re.search(r"0x[0-9a-f]{6,}", test_id)]  # an address differs by process
    # -n 2 starts, and each worker collects the whole suite without an error (-k deselects every test before xdist
    # compares the workers' lists, so the comparison of whole lists is the one across hash seeds above)
    shared = _pytest("-n", "2", "-q", "-k", "no_test_is_named_like_this", "tests")
    assert shared.returncode == 5, shared.stdout + shared.stderr  # 5: collected the same, ran none
