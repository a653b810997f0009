"""Accelerate-style scripts started by torchrun and by ``framework launch`` (its flags, and an Accelerate config
file with FSDP): two CPU ranks that train as the Runtime does, and the tutorial resuming exactly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.accelerate.loops import plain_loop_in_accelerates_order
from tests.cli.test_accelerate_launch import ACCELERATE_FSDP2

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
LAUNCH = [sys.executable, "-m", "framework", "launch"]
# The FSDP2 file `accelerate config` wrote for 2 GPUs, wrapping this test's layers, in full precision.
FSDP_CONFIG = ACCELERATE_FSDP2.replace("BertLayer", "Linear").replace("mixed_precision: bf16", "mixed_precision: 'no'")


def _environment(gpus_seen: bool = False) -> dict[str, str]:
    """The test's environment for a launch, without the launcher settings of this process; with ``gpus_seen``,
    as on a machine with two GPUs that a CPU run must not touch (tests/fake_cuda), else with any GPUs hidden."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("ACCELERATE_", "FSDP_")) and key != "OMP_NUM_THREADS"}
    paths = [str(ROOT), environment.get("PYTHONPATH", "")]
    if gpus_seen:
        paths.insert(0, str(ROOT / "tests" / "fake_cuda"))
        environment.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        environment["CUDA_VISIBLE_DEVICES"] = ""
    environment["PYTHONPATH"] = os.pathsep.join(paths)
    return environment


def _run(command: list[str], gpus_seen: bool = False, cwd: Path = ROOT) -> str:
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=_environment(gpus_seen), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


# `framework launch --num_processes 2 --cpu` (the flags) is not among these: in the tutorial's test below, ranks
# launched with those flags, cut off and resumed, end with the exact weights of the same script's torchrun-launched
# ranks (and resume in epoch 1 only if there are two), so the flags start the ranks torchrun does, which the torchrun
# case here shows to train as the plain process (a launch of its own here cost three processes and showed no more).
@pytest.mark.parametrize("launcher", ["torchrun on a GPU machine", "fsdp config file"])
def test_launched_ranks_train_as_one_plain_process_in_accelerates_order(tmp_path, launcher):
    script = [str(ROOT / "tests" / "accelerate" / "launched_loop.py"), str(tmp_path)]
    if launcher == "torchrun on a GPU machine":
        _run([*TORCHRUN, *script], gpus_seen=True)  # Accelerator(cpu=True): no CUDA call on any rank
    else:
        (tmp_path / "fsdp.yaml").write_text(FSDP_CONFIG)  # as `accelerate config` writes it, for GPUs
        _run([*LAUNCH, "--config_file", str(tmp_path / "fsdp.yaml"), *script])
    reference = plain_loop_in_accelerates_order(accumulate=2)["weights"]
    for rank in (0, 1):
        ran = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        assert ran["distributed_type"] == ("FSDP" if launcher == "fsdp config file" else "MULTI_CPU")
        assert ran["syncs"] == [False, True] * 8
        for name, value in ran["weights"].items():
            torch.testing.assert_close(value, reference[name], rtol=1e-5, atol=1e-6, msg=name)


def test_the_tutorial_cut_off_and_resumed_by_framework_launch_ends_as_the_uninterrupted_torchrun_run(tmp_path):
    tutorial = [str(ROOT / "tutorials" / "09_accelerate_loop.py")]
    whole = _run([*TORCHRUN, *tutorial, "--project-dir", str(tmp_path / "whole")])
    accuracies = re.findall(r"validation accuracy ([0-9.]+) over 360 images", whole)
    assert len(accuracies) == 5 and float(accuracies[-1]) > 0.9, whole
    launch = [*LAUNCH, "--num_processes", "2", "--cpu", *tutorial, "--project-dir", str(tmp_path / "cut")]
    stopped = _run([*launch, "--stop-after", "25"])
    assert "stopped after 25 batches, state saved in" in stopped and "checkpoint_0" in stopped
    resumed = _run([*launch, "--resume"])
    assert "resumed in epoch 1 after 2 batches" in resumed
    checksum = re.compile(r"weights checksum: ([0-9.]+)")
    assert checksum.search(resumed).group(1) == checksum.search(whole).group(1)
    assert os.listdir(tmp_path / "whole" / "model") == ["model.safetensors"]
