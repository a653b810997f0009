"""The GPU benchmark at its CPU size: every row runs, and the framework's rows read no more on the host and
compile no more during the timed steps than the plain loop's. The checkpoint benchmark's training and safety tables
at a small size: every row runs. The ZeRO memory benchmark's DeepSpeed rows at a small size: DeepSpeed holds the
bytes its ZeRO stages should (skipped without DeepSpeed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from framework.strategies.deepspeed import deepspeed_available

BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu.py"


def test_the_gpu_benchmark_runs_at_its_cpu_size_and_the_framework_reads_no_more_than_the_plain_loop():
    command = [sys.executable, str(BENCHMARK), "--size", "tiny", "--steps", "4", "--warmup", "3", "--backend", "eager",
               "--models", "gpt2", "--precisions", "bf16-mixed", "16-mixed", "--no-lightning"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    header = lines[1].split()
    assert header[:4] == ["model", "loop", "precision", "compiled"] and "syncs/step" in header
    rows = {tuple(line.split()[1:4]): dict(zip(header[4:], line.split()[4:], strict=True)) for line in lines[2:]}
    expected = {(loop, precision, compiled) for precision in ("bf16-mixed", "16-mixed")
                for loop, compiled in [("plain", "-"), ("plain", "forward"), ("plain", "step"), ("framework", "-"),
                                       ("framework", "compile=")]}
    assert set(rows) == expected | {("framework", "bf16-mixed", "defaults")}
    for (loop, precision, _), row in rows.items():
        assert float(row["ms/step"]) > 0 and float(row["tokens/s"]) > 0
        assert row["recompiles"] == "0", (loop, precision, row)
        if loop == "framework":
            assert float(row["syncs/step"]) <= float(rows[("plain", precision, "-")]["syncs/step"])


CHECKPOINT_BENCHMARK = BENCHMARK.parent / "checkpoint.py"


def test_the_checkpoint_benchmarks_training_table_runs_at_a_small_size(tmp_path):
    command = [sys.executable, str(CHECKPOINT_BENCHMARK), "--table", "training", "--width", "32", "--steps", "4",
               "--every", "2", "--runs", "1", "--dir", str(tmp_path)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    rows = [line.split("|")[1:-1] for line in lines if line.startswith("| ") and "ms" not in line]
    assert [(row[0].strip(), row[1].strip()) for row in rows] == [
        (runs_on, saving) for runs_on in ("one process", "zero3, 2 ranks") for saving in ("none", "sync", "async")]
    for row in rows:  # a tiny run's times may round to 0
        assert float(row[2]) >= 0 and float(row[4]) >= 0
        assert (row[3].strip() == "-") == (row[1].strip() == "none")
    assert os.listdir(tmp_path) == []  # its checkpoints are removed


def test_the_checkpoint_benchmarks_safety_table_runs_at_a_small_size(tmp_path):
    command = [sys.executable, str(CHECKPOINT_BENCHMARK), "--table", "safety", "--width", "32", "--runs", "1",
               "--dir", str(tmp_path)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in completed.stdout.splitlines()
            if line.startswith("| ") and "load s" not in line]
    assert [row[0].strip() for row in rows] == ["file", "directory"]
    for row in rows:
        assert all(float(cell) >= 0 for cell in row[1:]) and float(row[4]) > 0 and float(row[5]) > 0
    assert os.listdir(tmp_path) == []


RECOVERY_BENCHMARK = BENCHMARK.parent / "recovery.py"


def test_the_recovery_benchmark_runs_at_its_smallest_size(tmp_path):
    command = [sys.executable, str(RECOVERY_BENCHMARK), "--models", "small", "--ranks", "1", "--runs", "1",
               "--dir", str(tmp_path)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in completed.stdout.splitlines() if line.startswith("| small ")]
    assert [(row[1].strip(), row[2].strip()) for row in rows] == [
        ("1", "SIGKILL -> first new step"), ("1", "SIGUSR1 -> checkpoint complete"), ("1", "SIGUSR1 -> exited (75)")]
    for row in rows:
        assert float(row[3]) > 0
        parts = dict(part.rsplit(" ", 1) for part in row[4].strip().split(", "))
        assert all(float(value) >= -0.1 for value in parts.values()), row  # a part may span two processes' stamps
    assert os.listdir(tmp_path) == []  # the runs' directories and checkpoints are removed


ZERO_MEMORY_BENCHMARK = BENCHMARK.parent / "zero_memory.py"


def test_the_zero_memory_benchmarks_deepspeed_rows_hold_what_zeros_arithmetic_says():
    if not deepspeed_available() or shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("DeepSpeed (and the C++ compiler it builds its op with) is not installed")
    command = [sys.executable, str(ZERO_MEMORY_BENCHMARK), "--params", "2", "--steps", "3", "--warmup", "1",
               "--rows", "deepspeed_stage_2", "deepspeed_stage_3"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = {cells[0]: cells[1:] for line in completed.stdout.splitlines() if line.startswith("| deepspeed")
            for cells in [[cell.strip() for cell in line.split("|")[1:-1]]]}
    assert set(rows) == {"deepspeed_stage_2", "deepspeed_stage_3"}
    for name, cells in rows.items():
        # params, grads, optimizer, total and activations, each measured beside its theory (MB, rounded alike)
        assert cells[0:10:2] == cells[1:11:2], (name, cells)
    assert float(rows["deepspeed_stage_3"][0]) < float(rows["deepspeed_stage_2"][0])  # stage 3 shards parameters
    assert "DeepSpeed's gradient reduction buckets" in completed.stdout
