"""Accelerator(log_with=...): Accelerate's trackers over the framework's loggers, read back from their files, and
trackers of one's own."""

from __future__ import annotations

import os

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from framework.accelerate import Accelerator
from framework.accelerate.tracking import CometMLTracker, GeneralTracker, TensorBoardTracker
from framework.errors import MisconfigurationError
from framework.loggers import CSVLogger, TensorBoardLogger
from framework.testing import spawn


def _scalars(folder: str, tag: str) -> list[tuple[int, float]]:
    events = EventAccumulator(folder)
    events.Reload()
    return [(event.step, event.value) for event in events.Scalars(tag)]


def test_tensorboard_writes_to_the_project_folder_and_records_the_config(tmp_path):
    accelerator = Accelerator(cpu=True, log_with="tensorboard", project_dir=tmp_path)
    accelerator.init_trackers("proj", config={"lr": 0.1, "layers": 2})
    accelerator.log({"loss": 1.5}, step=1)
    accelerator.log({"loss": torch.tensor(0.5)}, step=2)
    tracker = accelerator.get_tracker("tensorboard")
    assert isinstance(tracker, TensorBoardTracker) and isinstance(tracker.logger, TensorBoardLogger)
    assert accelerator.get_tracker("tensorboard", unwrap=True) is tracker.writer is tracker.logger.experiment
    accelerator.end_training()
    assert os.path.normpath(tracker.logging_dir) == os.path.normpath(tracker.logger.log_dir) == str(tmp_path / "proj")
    assert _scalars(str(tmp_path / "proj"), "loss") == [(1, 1.5), (2, 0.5)]
    assert "lr: 0.1" in (tmp_path / "proj" / "hparams.yaml").read_text()


def test_a_framework_logger_and_mlflow_take_the_values(tmp_path):
    import mlflow

    csv = CSVLogger(tmp_path, name="csv")
    accelerator = Accelerator(cpu=True, log_with=[csv, "mlflow"], project_dir=tmp_path)
    accelerator.init_trackers("proj", init_kwargs={"mlflow": {"run_name": "first"}})
    accelerator.log({"accuracy": 0.75}, step=3)
    accelerator.end_training()
    assert "0.75" in (tmp_path / "csv" / "version_0" / "metrics.csv").read_text()
    logger = accelerator.get_tracker("mlflow").logger
    client = mlflow.MlflowClient(logger._tracking_uri)
    assert [(m.step, m.value) for m in client.get_metric_history(logger.run_id, "accuracy")] == [(3, 0.75)]
    assert client.get_run(logger.run_id).info.run_name == "first"
    assert str(tmp_path / "mlruns") in logger._tracking_uri


def test_what_the_trackers_cannot_do_is_named(tmp_path):
    with pytest.raises(MisconfigurationError, match=r"log_with='tensorboard' needs a folder"):
        Accelerator(cpu=True, log_with="tensorboard").init_trackers("proj")
    accelerator = Accelerator(cpu=True, log_with="tensorboard", project_dir=tmp_path)
    with pytest.raises(MisconfigurationError, match=r"\['comet'\] name no tracker"):
        accelerator.init_trackers("proj", init_kwargs={"comet": {}})
    with pytest.raises(ValueError, match="no such tracker"):
        accelerator.get_tracker("wandb")
    with pytest.raises(MisconfigurationError, match="a tracker is a name"):
        Accelerator(cpu=True, log_with=[3])
    with pytest.raises(MisconfigurationError, match="CometMLTracker is not supported"):
        CometMLTracker("proj")


def _log_on_rank(rank: int, folder: str) -> list[str]:
    accelerator = Accelerator(cpu=True, log_with="tensorboard", project_dir=folder)
    accelerator.init_trackers("proj")
    accelerator.log({"rank": float(rank)}, step=0)
    accelerator.end_training()
    return [type(tracker).__name__ for tracker in accelerator.trackers]


def test_only_the_main_process_tracks(tmp_path):
    assert spawn(2, _log_on_rank, str(tmp_path)) == [["TensorBoardTracker"], []]
    assert _scalars(str(tmp_path / "proj"), "rank") == [(0, 0.0)]


class _Recording(GeneralTracker):
    name = "recording"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def store_init_configuration(self, values):
        self.seen.append(("config", values))

    def log(self, values, step=None, **kwargs):
        self.seen.append(("log", values, step, kwargs))

    def finish(self):
        self.seen.append("finish")


def test_a_tracker_of_ones_own_gets_the_config_the_values_and_its_log_kwargs(tmp_path):
    recording = _Recording()
    accelerator = Accelerator(cpu=True, log_with=recording)
    accelerator.init_trackers("proj", config={"lr": 0.1})
    accelerator.log({"loss": 0.5}, step=4, log_kwargs={"recording": {"commit": False}})
    accelerator.end_training()
    assert accelerator.get_tracker("recording") is recording
    assert recording.seen == [("config", {"lr": 0.1}), ("log", {"loss": 0.5}, 4, {"commit": False}), "finish"]
    with pytest.raises(NotImplementedError, match="must set the class attribute `name`"):
        type("Nameless", (GeneralTracker,), {})()
