"""A rank that ends, however it ends, while another waits for it in a collective never holds the job: the other
ends within seconds, naming it (``strategies.group_exit``, ``runtime.peer_failure``). Real gloo ranks, forked from
one server that imported torch once (``leaving_rank``). Ranks that end together end cleanly, also when rank 0
holds the store."""

from __future__ import annotations

import json
import os
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


def _run(server, out: Path, place: str, how: str, **more: str) -> dict:
    server.stdin.write(json.dumps({"out": str(out), "place": place, "how": how, **more}) + "\n")
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


_MEETS_AT_ITS_END = """
import os, time
import torch.distributed as dist
from framework.strategies import group_exit

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    time.sleep(0.3)  # rank 1 is at its end first, reading the count of the ranks there
met = group_exit.all_ranks_leaving(rank, 2)
print(f"rank {rank} met: {met}", flush=True)
if rank == 1 and met:
    dist.destroy_process_group()
os._exit(0)  # rank 0 at once, as a spawned rank whose destroy is quick
"""


def test_rank_0_holding_the_store_ends_only_once_the_others_saw_every_rank_come():
    # were rank 0 to end at once, rank 1's next read of the count would find the store gone: torch prints
    # "Connection reset by peer" with a C++ trace, and rank 1 leaves its group undestroyed
    from framework.runtime.worker_processes import free_port

    environment = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    ranks = [subprocess.Popen([sys.executable, "-c", _MEETS_AT_ITS_END], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env={**environment, "RANK": str(rank)}) for rank in (0, 1)]
    ended = [rank.communicate(timeout=60) for rank in ranks]
    for rank, (out, errors) in enumerate(ended):
        assert out == f"rank {rank} met: True\n", errors[-3000:]
        assert "Connection reset" not in errors, errors[-3000:]
