"""The README's main job runs and learns."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_reaches_a_good_validation_accuracy():
    done = subprocess.run([sys.executable, str(ROOT / "tutorials" / "01_quickstart.py")], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    match = re.search(r"validation accuracy: ([0-9.]+)", done.stdout)
    assert match and float(match.group(1)) > 0.9, done.stdout


def test_own_loop_tutorial_learns_on_two_ranks_and_counts_each_review_once():
    done = subprocess.run([sys.executable, str(ROOT / "tutorials" / "04_runtime_loop.py"), "--devices", "2"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    epochs = re.findall(r"validation accuracy ([0-9.]+) over (\d+) reviews", done.stdout)
    assert len(epochs) == 5, done.stdout  # printed once (rank 0), per epoch
    assert all(seen == "500" for _, seen in epochs)
    assert float(epochs[-1][0]) > 0.9, done.stdout


def test_gpt_zero3_tutorial_learns_on_two_ranks_and_generates_from_the_returned_weights():
    done = subprocess.run([sys.executable, str(ROOT / "tutorials" / "07_gpt_zero3.py"), "--max-steps", "60"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    match = re.search(r"held-out loss: ([0-9.]+) before training, ([0-9.]+) after \(guessing uniformly over \d+ "
                      r"characters: ([0-9.]+)\)", done.stdout)
    assert match, done.stdout
    before, after, uniform = map(float, match.groups())
    # the weights the calling process got back predict unseen text far better than they did untrained
    assert after < before - 1.0 and after < 0.75 * uniform, done.stdout
    generated = re.search(r"generated: (.*)", done.stdout)
    assert generated, done.stdout
    text = ast.literal_eval(generated.group(1))
    assert text.startswith("The keeper ") and len(text) == len("The keeper ") + 60, text


def test_tensor_parallel_tutorial_learns_on_2x2_ranks_with_and_without_sequence_parallel():
    losses = []
    for extra in ([], ["--sequence-parallel"]):
        # 15 steps take the loss from 3.66 to 2.35: past the bar below, with most of each run's time in starting it
        done = subprocess.run([sys.executable, str(ROOT / "tutorials" / "10_tensor_parallel.py"), "--max-steps", "15",
                               *extra], capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert done.returncode == 0, done.stderr
        match = re.search(r"loss: ([0-9.]+) before training, ([0-9.]+) after", done.stdout)
        assert match, done.stdout
        before, after = float(match.group(1)), float(match.group(2))
        assert after < before - 1.0, done.stdout
        losses.append(after)
    assert losses[0] == pytest.approx(losses[1], abs=1e-3)  # sequence parallel splits the work, not the result


def test_resume_tutorial_ends_with_the_weights_of_an_uninterrupted_run():
    done = subprocess.run([sys.executable, str(ROOT / "tutorials" / "06_resume.py"), "--max-steps", "40",
                           "--stop-at", "17"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "first run stopped: the machine went away after step 17" in done.stdout
    assert "resumed from last.ckpt and trained to step 40" in done.stdout
    assert "largest weight difference, uninterrupted vs resumed: 0.0" in done.stdout


def test_callbacks_logging_tutorial_keeps_the_best_checkpoints_and_writes_both_logs(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "tutorials" / "02_callbacks_logging.py"), "--max-epochs", "8",
                           "--logs", str(tmp_path / "logs")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    best = re.search(r"best checkpoint: (epoch=\d+-val_loss=[0-9.]+\.ckpt) \(val_loss ([0-9.]+)\)", done.stdout)
    assert best and float(best.group(2)) < 0.5, done.stdout
    kept = sorted(path.name for path in (tmp_path / "logs" / "csv" / "version_0" / "checkpoints").iterdir())
    assert len(kept) == 3 and "last.ckpt" in kept and best.group(1) in kept, kept  # top 2 and last
    assert "'train_loss'" in done.stdout and "'val_loss'" in done.stdout  # the CSV's columns
    events = (tmp_path / "logs" / "tensorboard" / "version_0").iterdir()
    assert any(path.name.startswith("events.out.tfevents") for path in events)
    assert "plotted the losses" in done.stdout or "matplotlib is not installed" in done.stdout


def test_ddp_and_precision_tutorial_learns_on_two_ranks_in_bf16():
    done = subprocess.run([sys.executable, str(ROOT / "tutorials" / "03_ddp_and_precision.py"), "--max-epochs", "10"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    match = re.search(r"2 process\(es\), strategy='ddp', precision='bf16-mixed': validation accuracy ([0-9.]+)",
                      done.stdout)
    assert match and float(match.group(1)) > 0.85, done.stdout


def test_config_tutorial_trains_from_the_command_line_and_validates_the_last_checkpoint(tmp_path):
    def framework_command(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "framework", *args], capture_output=True, text=True,
                              cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)

    config = str(ROOT / "tutorials" / "05_config.yaml")
    fitted = framework_command("fit", "--config", config, "--trainer.max_epochs=4")
    assert fitted.returncode == 0, fitted.stderr
    assert "`Trainer.fit` stopped: `max_epochs=4` reached." in fitted.stdout + fitted.stderr
    saved = tmp_path / "tutorial_logs" / "quickstart_cli" / "version_0" / "config.yaml"
    assert "max_epochs: 4" in saved.read_text()

    validated = framework_command("validate", "--config", config, "--ckpt_path", "last")
    assert validated.returncode == 0, validated.stderr
    match = re.search(r"val_acc\s+([0-9.]+)", validated.stdout)
    assert match and float(match.group(1)) > 0.85, validated.stdout


def test_tuning_tutorial_finds_a_rate_and_a_size_profiles_and_writes_predictions(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "tutorials" / "08_tuning.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rate = re.search(r"suggested learning rate: ([0-9.e-]+)", done.stdout)
    assert rate and 1e-5 <= float(rate.group(1)) <= 1.0, done.stdout
    assert "batch size: 64" in done.stdout  # 8, 16, 32, 64: the four trials allowed
    profile = (tmp_path / "fit-profile.txt").read_text()
    assert "FIT Profiler Report" in profile and "training_step" in profile and "optimizer_step" in profile
    written = re.search(r"wrote (\d+) prediction files, (\d+) images: accuracy ([0-9.]+)", done.stdout)
    assert written and written.groups()[:2] == ("6", "359") and float(written.group(3)) > 0.9, done.stdout
    plotted = importlib.util.find_spec("matplotlib") is not None  # the dev extra installs it
    assert ("saved the loss curve" in done.stdout) == (tmp_path / "lr_find.png").exists() == plotted
