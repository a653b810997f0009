"""A rank that ends, however it ends, while another waits for it in a collective never holds the job: the other
ends within seconds, naming it (``strategies.group_exit``, ``runtime.peer_failure``). Real gloo ranks, forked from
one server that imported torch once (``leaving_rank``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
_STATUS = {"exit": 3, "os_exit": 4, "raise": 1, "kill": -9}
_NAMED = {
    "exit": "[framework] Rank 1 reached its end (sys.exit, or the end of its script)",
    "raise": "[framework] Rank 1 of 2 (node 0) failed first, with RuntimeError: rank 1 fails at",
    "os_exit": "[framework] The process of rank 1 had ended (killed by a signal, or os._exit)",
    "kill": "[framework] The process of rank 1 had ended (killed by a signal, or os._exit)",
}


@pytest.fixture(scope="module")
def server():
    process = subprocess.Popen([sys.executable, "-m", "tests.strategies.leaving_rank"], cwd=ROOT, text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    yield process
    process.stdin.close()
    process.wait(timeout=60)


def _run(server, out: Path, place: str, how: str) -> dict:
    server.stdin.write(json.dumps({"out": str(out), "place": place, "how": how}) + "\n")
    server.stdin.flush()
    return json.loads(server.stdout.readline())


@pytest.mark.parametrize("how", ["exit", "os_exit", "raise", "kill"])
@pytest.mark.parametrize("place", ["step", "validation", "save", "accelerate"])
def test_the_rank_left_waiting_ends_within_seconds_naming_the_one_that_ended(server, tmp_path, place, how):
    result = _run(server, tmp_path, place, how)
    rank0, rank1 = result["codes"]
    assert rank1 == _STATUS[how], (tmp_path / "stderr-1").read_text()[-3000:]
    errors = (tmp_path / "stderr-0").read_text()
    assert rank0 not in (None, 0), errors[-3000:]  # its collective failed: it did not wait out the timeout
    assert result["rank0_ended_after_s"] < 10, errors[-3000:]
    assert _NAMED[how] in errors, errors[-3000:]
