"""ThroughputMonitor: rates logged at the logged steps, consistent with batch and item counts."""

from __future__ import annotations

import pytest

from framework.callbacks import ThroughputMonitor
from tests.helpers import RecordingLogger, Regressor, loader, quiet_trainer


def test_rates_are_logged_every_log_every_n_steps():
    logger = RecordingLogger()
    monitor = ThroughputMonitor(length_fn=lambda batch: batch[0].numel())
    quiet_trainer(max_epochs=1, logger=logger, log_every_n_steps=2, callbacks=[monitor]).fit(
        Regressor(), loader(n=64, batch_size=8))
    rows = [(step, metrics) for step, metrics in logger.calls if "train/batches_per_sec" in metrics]
    assert [step for step, _ in rows] == [1, 3, 5, 7]
    for _, metrics in rows:
        assert metrics["train/samples_per_sec"] == pytest.approx(8 * metrics["train/batches_per_sec"], rel=1e-6)
        assert metrics["train/items_per_sec"] == pytest.approx(4 * metrics["train/samples_per_sec"], rel=1e-6)
        assert metrics["train/batches_per_sec"] > 0
    assert [m["train/samples"] for _, m in rows] == [16, 32, 48, 64]


def test_without_a_length_function_there_are_no_item_rates():
    logger = RecordingLogger()
    quiet_trainer(max_epochs=1, logger=logger, log_every_n_steps=4, callbacks=[ThroughputMonitor()]).fit(
        Regressor(), loader())
    keys = set().union(*(metrics for _, metrics in logger.calls))
    assert "train/samples_per_sec" in keys and not any("items" in key for key in keys)
