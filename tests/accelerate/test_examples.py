"""Scripts of our own in the style of Accelerate's examples (``tests/accelerate/examples``), run as a user runs
them: with ``python`` on one process and with ``framework launch --num_processes 2 --cpu`` on two, checked for
what Accelerate's own tests of its examples check (checkpoint folders, where a resumed run starts) and more (a
resumed run ends as the uninterrupted one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent / "examples"
# Seen once on CI (and in none of 25 runs here), after every line was printed: a rank aborting in C++ static
# destruction, past the process group's destroy (torch's own exit-time lifetime bugs: pytorch/pytorch#190489,
# #195837). A rank that aborted on every run would still fail here.
_EXIT_ABORT = "terminate called without an active exception"


def _run(script: str, arguments: list[str], folder: Path, processes: int) -> str:
    path = str(EXAMPLES / script)
    launch = [sys.executable, "-m", "framework", "launch", "--num_processes", "2", "--cpu"] if processes == 2 else [
        sys.executable]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(EXAMPLES), "WANDB_MODE": "offline",
                   "WANDB_DIR": str(folder), "WANDB_SILENT": "true"}
    result = subprocess.run([*launch, path, *arguments], cwd=folder, capture_output=True, text=True, timeout=600,
                            env=environment)
    if result.returncode != 0 and _EXIT_ABORT in result.stderr:  # torch's, at C++ teardown: one more try
        result = subprocess.run([*launch, path, *arguments], cwd=folder, capture_output=True, text=True,
                                timeout=600, env=environment)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def _epochs(output: str) -> dict[str, str]:
    return {line.split(":")[0]: line for line in output.splitlines() if line.startswith(("epoch ", "weights:"))}


def _trained_well(epochs: dict[str, str]) -> None:
    assert "'count': 44" in epochs["epoch 2"]  # every evaluation sample once, on one process as on two
    assert float(epochs["epoch 2"].split("'accuracy': ")[1].split(",")[0]) > 0.8


# The resume by epoch runs on two processes only: the one-process run is the by-steps test's, and the epoch a
# checkpoint names is read the same way whatever the number of processes (a one-process run of it cost two more
# processes and showed nothing the two tests together do not).
def test_checkpoints_by_epoch_resume_at_the_next_epoch_and_end_as_the_uninterrupted_run_on_two_processes(tmp_path):
    whole = _run("text_classification.py", ["--checkpointing_steps", "epoch", "--output_dir", "runs",
                                            "--with_tracking"], tmp_path, 2)
    assert sorted(os.listdir(tmp_path / "runs")) == ["epoch_0", "epoch_1", "epoch_2"]
    # log_with="all": TensorBoard, W&B (offline here) and MLflow, each in its folder
    assert (tmp_path / "logs" / "text_classification" / "hparams.yaml").exists()
    assert (tmp_path / "logs" / "mlruns").is_dir() and (tmp_path / "wandb").is_dir()
    resumed = _run("text_classification.py", ["--resume_from_checkpoint", "runs/epoch_0"], tmp_path, 2)
    assert "epoch 0:" not in resumed and "epoch 1:" in resumed
    finished, continued = _epochs(whole), _epochs(resumed)
    assert continued["epoch 2"] == finished["epoch 2"] and continued["weights"] == finished["weights"]
    _trained_well(finished)


def test_checkpoints_by_steps_resume_inside_the_epoch_on_one_process(tmp_path):
    whole = _run("text_classification.py", ["--checkpointing_steps", "4", "--output_dir", "runs"], tmp_path, 1)
    assert sorted(os.listdir(tmp_path / "runs")) == ["step_12", "step_16", "step_4", "step_8"]  # 6 batches an epoch
    resumed = _run("text_classification.py", ["--resume_from_checkpoint", "runs/step_4"], tmp_path, 1)
    assert "epoch 0:" in resumed and "epoch 1:" in resumed
    assert _epochs(resumed) == _epochs(whole)
    _trained_well(_epochs(whole))


EXPECTED_FEATURES = {
    1: ["early_stopping: every process stopped after batch 1", "gradient_accumulation: 9 optimizer steps",
        "autoregressive: 3 updates, gradient norms finite: True",
        "local_sgd: weights equal on every process after the block: True", "memory: trained with batch size 15",
        "multi_process_metrics: 44 samples counted once", "profiler: table True, trace written True",
        "schedule_free: evaluated 44 samples in eval mode", "ddp_comm_hook: accuracy",
        "cross_validation: 3 folds, 20 test predictions", "automatic_gradient_accumulation: batch 15 x 2, 4 optimizer",
        "fsdp: FSDP, whole state of 5 tensors"],
    2: ["early_stopping: every process stopped after batch 1", "gradient_accumulation: 6 optimizer steps",
        "autoregressive: 2 updates, gradient norms finite: True",
        "local_sgd: weights equal on every process after the block: True", "memory: trained with batch size 15",
        "multi_process_metrics: 44 samples counted once", "profiler: table True, trace written True",
        "schedule_free: evaluated 44 samples in eval mode", "ddp_comm_hook: accuracy",
        "cross_validation: 3 folds, 20 test predictions", "automatic_gradient_accumulation: batch 15 x 2, 2 optimizer",
        "fsdp: FSDP, whole state of 5 tensors"],
}


@pytest.mark.parametrize("processes", [1, 2])
def test_every_by_feature_example_runs(tmp_path, processes):
    lines = [line for line in _run("by_feature.py", [], tmp_path, processes).splitlines() if ": " in line]
    assert len(lines) == len(EXPECTED_FEATURES[processes])
    for line, expected in zip(lines, EXPECTED_FEATURES[processes]):
        assert line.startswith(expected), (line, expected)
