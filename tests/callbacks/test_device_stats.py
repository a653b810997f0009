"""DeviceStatsMonitor: CPU statistics (through the real psutil) reach the logger at the logging steps."""

from __future__ import annotations

import csv

import pytest

from framework.callbacks import DeviceStatsMonitor
from framework.errors import MisconfigurationError
from framework.loggers import CSVLogger
from tests.helpers import Regressor, loader, quiet_trainer


def test_cpu_statistics_are_logged_at_the_logging_steps(tmp_path):
    pytest.importorskip("psutil", reason="the dev extra installs psutil")
    logger = CSVLogger(tmp_path)
    trainer = quiet_trainer(max_epochs=1, logger=logger, log_every_n_steps=2, callbacks=[DeviceStatsMonitor()])
    trainer.fit(Regressor(), loader())
    with open(logger.metrics_file) as file:
        logged = list(csv.DictReader(file))
    key = "DeviceStatsMonitor.on_train_batch_end/cpu_percent"
    assert sorted({int(row["step"]) for row in logged if row[key]}) == [1, 3, 5, 7]
    assert all(0.0 <= float(row[key]) <= 100.0 * 64 for row in logged if row[key])
    assert any(row["DeviceStatsMonitor.on_train_batch_start/cpu_vm_percent"] for row in logged)


def test_without_a_logger_it_is_refused():
    with pytest.raises(MisconfigurationError, match="DeviceStatsMonitor callback with Trainer that has no logger"):
        quiet_trainer(max_epochs=1, callbacks=[DeviceStatsMonitor()]).fit(Regressor(), loader())
