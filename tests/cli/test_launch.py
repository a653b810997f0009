"""`framework launch` (torchrun underneath) runs scripts written for Trainer(devices=N) unchanged."""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

from framework.runtime.worker_processes import free_port
from tests.strategies.ddp_models import Regressor, plain_pytorch_weights, regression_data

ROOT = Path(__file__).resolve().parents[2]
RUN = [sys.executable, "-m", "framework", "launch"]


def _environment() -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), environment.get("PYTHONPATH", "")])
    return environment


def _reference() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return plain_pytorch_weights(Regressor(), regression_data(), batch_size=8, epochs=2)


def _what_the_ranks_saw(processes: list[subprocess.Popen], out: Path) -> list[dict]:
    """Each rank's record from launched_run.py, once all ended well and trained as one process with the doubled
    batch (16 steps, the plain loop's weights)."""
    outputs = [process.communicate(timeout=240)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    reference = _reference()
    seen = [torch.load(out / f"rank{rank}.pt", weights_only=True) for rank in range(len(processes))]
    for record in seen:
        assert record["global_step"] == 16
        for name, value in record["weights"].items():
            torch.testing.assert_close(value, reference[name], rtol=1e-5, atol=1e-6, msg=name)
    return seen


def test_two_nodes_on_one_machine_train_as_one_process_with_the_doubled_batch(tmp_path):
    port = str(free_port())
    script = [str(ROOT / "tests" / "strategies" / "launched_run.py"), str(tmp_path), "1", "2"]
    nodes = [
        subprocess.Popen([*RUN, "--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node", "1", "--master-addr",
                          "127.0.0.1", "--master-port", port, *script], cwd=ROOT, env=_environment(),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank in (0, 1)
    ]
    for rank, seen in enumerate(_what_the_ranks_saw(nodes, tmp_path)):
        assert (seen["world_size"], seen["node_rank"], seen["local_rank"]) == (2, rank, 0)


def test_launch_runs_the_tutorial_unchanged_on_two_ranks():
    done = subprocess.run([*RUN, "--nproc-per-node", "2", str(ROOT / "tutorials" / "01_quickstart.py")],
                          capture_output=True, text=True, cwd=ROOT, env=_environment(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    accuracies = re.findall(r"validation accuracy: ([0-9.]+)", done.stdout)
    assert len(accuracies) == 2 and len(set(accuracies)) == 1  # each rank's script prints the same synced value
    assert float(accuracies[0]) > 0.9


def test_each_rank_takes_its_share_of_the_cores_and_ends_gloo_before_exit(tmp_path):
    script = [str(ROOT / "tests" / "strategies" / "launched_run.py"), str(tmp_path), "2", "1"]
    done = subprocess.run([*RUN, "--nproc-per-node", "2", *script], capture_output=True, text=True, cwd=ROOT,
                          env=_environment(), timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    reference = _reference()
    for rank in (0, 1):
        seen = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        assert seen["threads"] == max(1, cores // 2)
        # gloo's threads left to C++'s teardown at exit can abort a rank that finished (SIGABRT, a failed launch)
        threads = tmp_path / f"rank{rank}.threads"
        if os.path.isdir("/proc/self/task"):  # where launched_run.py can list them
            assert "gloo" not in threads.read_text(), threads.read_text()
        for name, value in seen["weights"].items():
            torch.testing.assert_close(value, reference[name], rtol=1e-5, atol=1e-6, msg=name)


def test_a_rank_that_exits_while_another_waits_for_it_ends_the_job_in_seconds_naming_it(tmp_path):
    # Rank 1 calls sys.exit(1) while rank 0 waits for it in wait_for_everyone(): no exit handler may wait for
    # the others in a collective of its own (each would wait for the other until gloo's 30-minute timeout).
    script = str(ROOT / "tests" / "cli" / "leaving_script.py")
    done = subprocess.run([*RUN, "--num_processes", "2", "--cpu", script, str(tmp_path)], capture_output=True,
                          text=True, env=_environment(), timeout=120)
    ended_after = time.time() - float((tmp_path / "leaving").read_text())
    assert done.returncode == 1, done.stderr[-3000:]
    assert ended_after < 10, f"the job ended {ended_after:.0f} s after rank 1 left"
    assert "Rank 1 reached its end (sys.exit, or the end of its script)" in done.stderr, done.stderr[-3000:]
    assert "rank 1 exited with status 1 first, which ended the job" in done.stderr
    assert "rank 0 was answered" not in done.stdout


def test_usage():
    done = subprocess.run([sys.executable, "-m", "framework"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "framework launch --nproc-per-node" in done.stdout
    done = subprocess.run([sys.executable, "-m", "framework", "fly"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown command 'fly'" in done.stderr


def _free_port_in_slurms_range() -> int:
    """A free port the ranks of a SLURM job derive from its id (15000 + id % 5000)."""
    for port in random.sample(range(15000, 20000), 200):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise RuntimeError("no free port between 15000 and 20000")


def test_tasks_started_by_slurm_find_each_other_without_master_addr(tmp_path):
    # What `srun --ntasks=2 python launched_run.py ...` gives each task: SLURM's variables, no MASTER_ADDR/PORT.
    environment = {key: value for key, value in _environment().items()
                   if not key.startswith(("MASTER_", "SLURM_")) and key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    slurm = {"SLURM_NTASKS": "2", "SLURM_NNODES": "1", "SLURM_NODEID": "0", "SLURM_NODELIST": "127.0.0.1",
             "SLURM_JOB_ID": str(_free_port_in_slurms_range() - 15000), "SLURM_JOB_NAME": "train"}
    script = [sys.executable, str(ROOT / "tests" / "strategies" / "launched_run.py"), str(tmp_path), "2", "1"]
    tasks = [subprocess.Popen(script, cwd=ROOT, env={**environment, **slurm, "SLURM_PROCID": str(rank),
                                                      "SLURM_LOCALID": str(rank)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    for rank, seen in enumerate(_what_the_ranks_saw(tasks, tmp_path)):
        assert (seen["world_size"], seen["local_rank"]) == (2, rank)


def test_the_launchers_own_options_end_at_the_script_whatever_flags_torchrun_has():
    from torch.distributed.run import get_args_parser

    from framework.cli.launch import _flags_of, _options_before_script

    flags = _flags_of(get_args_parser())
    flag = "--virtual-local-rank" if "--virtual-local-rank" in flags else "--standalone"  # not in every torchrun
    argv = [flag, "--nproc-per-node", "2", "--max-restarts=1", "train.py", "--epochs", "3"]
    assert _options_before_script(argv, flags) == [flag, "--nproc-per-node", "2", "--max-restarts=1"]
    assert _options_before_script(["-m", "package.train", "--lr", "1"], flags) == ["-m"]
