"""The suite's test ids are the same in every process, so `pytest -n 2` (pytest-xdist) can share the suite out."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Loaded by each xdist worker: writes the ids it collected, then lets no test run (xdist has compared the workers'
# lists by then, and refuses to go on where they differ).
RUN_NOTHING = '''
import os
from pathlib import Path

import pytest


def pytest_collection_finish(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "controller")
    ids = "\\n".join(item.nodeid for item in session.items)
    (Path(os.environ["COLLECTED_IDS"]) / f"{worker}.txt").write_text(ids)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    return True
'''


# A run shared out over xdist workers that drew their own hash seeds has made this very check on the whole suite
# before its first test (`pytest` alone runs so): a second collection of everything would only repeat it.
_CHECKED_BY_THIS_RUN = (int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")) >= 2
                        and "PYTHONHASHSEED" not in os.environ)


@pytest.mark.skipif(_CHECKED_BY_THIS_RUN, reason="this run's own xdist workers, under their own hash seeds, "
                                                "collected the same ids (xdist refuses to run otherwise)")
def test_test_ids_are_the_same_in_every_process_and_xdist_workers_agree(tmp_path):
    # No PYTHONHASHSEED: each worker draws its own, so the two lists xdist compares come from two hash seeds, and
    # a test id built from a set's order or an object's address would differ between them.
    (tmp_path / "run_nothing.py").write_text(RUN_NOTHING)
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONHASHSEED"}
    environment.update(PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]), COLLECTED_IDS=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "run_nothing", "-n", "2",
                           "-q", "tests"], cwd=ROOT, capture_output=True, text=True, env=environment, timeout=300)
    # 0 and none run: every worker collected the same (xdist's "Different tests were collected" makes it 1)
    assert done.returncode == 0 and "no tests ran" in done.stdout, done.stdout + done.stderr
    ids, again = ((tmp_path / f"{worker}.txt").read_text().splitlines() for worker in ("gw0", "gw1"))
    assert len(ids) > 800 and ids == again
    assert not [test_id for test_id in ids if re.search(r"0x[0-9a-f]{6,}", test_id)]  # an address differs by process
