"""Profilers: what they record in a real fit, their reports on the console and in files (a file per rank)."""

from __future__ import annotations

import json

import pytest

from framework.errors import MisconfigurationError
from framework.profilers import AdvancedProfiler, PassThroughProfiler, PyTorchProfiler, SimpleProfiler
from tests.helpers import Regressor, loader, quiet_trainer


class WithHooks(Regressor):
    def on_train_batch_end(self, outputs, batch, batch_idx):
        pass


def test_the_simple_profiler_times_hooks_steps_and_fetches_and_prints_a_table(caplog):
    profiler = SimpleProfiler()
    trainer = quiet_trainer(max_epochs=2, profiler=profiler)
    with caplog.at_level("INFO", logger="framework"):
        trainer.fit(WithHooks(), loader(), loader(n=16))
    calls = {name: len(durations) for name, durations in profiler.recorded_durations.items()}
    assert calls["training_step"] == calls["optimizer_step"] == calls["backward"] == 16
    assert calls["on_train_batch_end"] == 16 and calls["run_training_epoch"] == 2
    assert calls["validation_step"] == 2 * 2 + 2  # two batches per epoch, and the sanity check's two
    assert calls["train_dataloader_next"] >= 16
    report = next(message for message in caplog.messages if "FIT Profiler Report" in message)
    assert "Mean duration (s)" in report and "training_step" in report
    header, total = report.splitlines()[2], report.splitlines()[4]
    assert "Num calls" in header and total.startswith("Total")


def test_with_a_filename_each_stage_writes_its_own_report(tmp_path):
    profiler = SimpleProfiler(dirpath=tmp_path, filename="perf")
    trainer = quiet_trainer(max_epochs=1, profiler=profiler)
    trainer.fit(Regressor(), loader())
    trainer.validate(Regressor(), loader(n=16), verbose=False)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fit-perf.txt", "validate-perf.txt"]
    assert "training_step" in (tmp_path / "fit-perf.txt").read_text()
    validate = (tmp_path / "validate-perf.txt").read_text()
    assert "validation_step" in validate and "training_step" not in validate  # each run its own records


def test_on_two_ranks_each_rank_writes_its_report(tmp_path):
    trainer = quiet_trainer(devices=2, max_epochs=1, profiler=SimpleProfiler(dirpath=tmp_path, filename="perf"))
    trainer.fit(Regressor(), loader())
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fit-perf-0.txt", "fit-perf-1.txt"]
    for rank in (0, 1):
        assert "training_step" in (tmp_path / f"fit-perf-{rank}.txt").read_text()


def test_the_advanced_profiler_reports_cprofile_statistics_per_action(tmp_path):
    profiler = AdvancedProfiler(dirpath=tmp_path, filename="perf", line_count_restriction=5)
    quiet_trainer(max_epochs=1, profiler=profiler).fit(Regressor(), loader())
    report = (tmp_path / "fit-perf.txt").read_text()
    assert "Profile stats for: run_training_epoch" in report and "cumulative" in report
    assert "Profile stats for: training_step" not in report  # inside the epoch: counted there


def test_names_pass_through_and_bad_input(caplog):
    assert isinstance(quiet_trainer(profiler="simple").profiler, SimpleProfiler)
    assert isinstance(quiet_trainer(profiler="advanced").profiler, AdvancedProfiler)
    trainer = quiet_trainer(max_epochs=1, profiler="passthrough")
    assert isinstance(trainer.profiler, PassThroughProfiler)
    trainer.fit(Regressor(), loader())
    assert trainer.fit_loop.run.profiling is None  # nothing wrapped
    expected = r"Trainer\(profiler='fancy'.*'advanced', 'passthrough', 'pytorch', 'simple'"
    with pytest.raises(MisconfigurationError, match=expected):
        quiet_trainer(profiler="fancy")
    profiler = SimpleProfiler()
    profiler.start("a")
    with pytest.raises(ValueError, match="already started"):
        profiler.start("a")
    with pytest.raises(ValueError, match="never started"):
        profiler.stop("b")


def test_the_pytorch_profiler_marks_each_action_and_writes_a_table_and_a_chrome_trace(tmp_path):
    profiler = PyTorchProfiler(dirpath=tmp_path, filename="perf", row_limit=200)
    quiet_trainer(max_epochs=1, limit_train_batches=2, profiler=profiler).fit(WithHooks(), loader())
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fit-perf.pt.trace.json", "fit-perf.txt"]
    table = (tmp_path / "fit-perf.txt").read_text()
    assert "training_step" in table and "aten::addmm" in table  # the ranges and the operators inside them
    events = json.loads((tmp_path / "fit-perf.pt.trace.json").read_text())["traceEvents"]
    assert sum(event.get("name") == "on_train_batch_end" for event in events) == 2
    assert isinstance(quiet_trainer(profiler="pytorch").profiler, PyTorchProfiler)
