"""A rank's forked children (its DataLoader workers) die with it, so its peers learn at once that it is gone."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from framework.runtime.worker_processes import RankExitedError
from framework.testing import spawn

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")


def _death_signal() -> int:
    value = ctypes.c_int()
    ctypes.CDLL(None).prctl(2, ctypes.byref(value))  # PR_GET_PDEATHSIG
    return value.value


class DeathSignals(Dataset):
    """Each item: the signal the worker reading it gets when its parent dies, and the worker's pid."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([_death_signal(), os.getpid()])


def _first_batch(loader: DataLoader) -> torch.Tensor:
    return next(iter(loader))[0]


def _death_signals_of_workers(rank: int) -> tuple[int, int]:
    loader = DataLoader(DeathSignals(), batch_size=1, num_workers=1)
    from_main_thread = _first_batch(loader)
    from_thread = {}
    reader = threading.Thread(target=lambda: from_thread.update(batch=_first_batch(loader)))
    reader.start()
    reader.join()
    return int(from_main_thread[0]), int(from_thread["batch"][0])


def test_loader_workers_a_rank_forks_are_killed_with_it_unless_forked_from_another_thread():
    # a child forked from a thread that ends would die with that thread: those are left as torch makes them
    assert spawn(2, _death_signals_of_workers) == [(signal.SIGKILL, 0)] * 2
    assert _death_signals_of_workers(0) == (0, 0)  # this process is no rank of a group of several


def _killed_while_its_worker_runs(rank: int, pid_file: str) -> None:
    if rank == 1:  # rank 0 waits for nothing: spawn hears of rank 1's end as soon as it happens
        iterator = iter(DataLoader(DeathSignals(), batch_size=1, num_workers=1, persistent_workers=True))
        Path(pid_file).write_text(str(int(next(iterator)[0][1])))
        os.kill(os.getpid(), signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie no one reaped holds no sockets


def test_a_killed_ranks_loader_worker_ends_with_it_and_the_rank_is_seen_gone_at_once(tmp_path):
    pid_file = tmp_path / "worker-pid"
    with pytest.raises(RankExitedError, match="Rank 1 of 2"):
        spawn(2, _killed_while_its_worker_runs, str(pid_file))
    # Rank 1 died just after writing the file. A worker left running holds the rank's pipes and sockets (the end
    # that tells its parent it is gone among them) until torch's worker looks for its parent, every 5 s.
    assert time.time() - pid_file.stat().st_mtime < 2.5
    worker = int(pid_file.read_text())
    deadline = time.monotonic() + 1.0  # the kernel's SIGKILL may still be on its way
    while _running(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(worker)
