"""CSVLogger: file layout, versions, rows at Lightning's steps, a growing header, hparams.yaml, faults."""

from __future__ import annotations

import argparse
import csv
import os
import pathlib
import uuid
import warnings

import fsspec
import pytest
import yaml

from framework import DataModule
from framework.errors import MisconfigurationError
from framework.loggers import CSVLogger
from framework.testing import spawn
from tests.helpers import Regressor, loader, quiet_trainer


def rows(path):
    with fsspec.open(path, "r", newline="") as handle:
        return list(csv.DictReader(handle))


class EveryKind(Regressor):
    """Logs a step value, an epoch value, both, and a validation value."""

    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("loss", loss, on_step=True, on_epoch=True)
        self.log("step_only", float(batch_idx))
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.loss(batch))


def test_rows_come_at_lightnings_steps():
    # Lightning 2.6.6's CSVLogger on this run (12 batches an epoch, accumulate_grad_batches=2, log_every_n_steps=5,
    # 2 epochs, validation each epoch) writes rows at steps 4, 5 (validation), 5 (training epoch), 9, 11, 11.
    class Plain(Regressor):
        def training_step(self, batch, batch_idx):
            loss = self.loss(batch)
            self.log("loss", loss, on_step=True, on_epoch=True)
            return loss

    logger = CSVLogger("logs")
    trainer = quiet_trainer(max_epochs=2, logger=logger, accumulate_grad_batches=2, log_every_n_steps=5,
                            num_sanity_val_steps=0)
    trainer.fit(Plain(), loader(n=96), loader(n=16))
    table = rows(logger.metrics_file)
    assert list(table[0]) == ["epoch", "loss_epoch", "loss_step", "step", "val_loss"]  # alphabetical, as Lightning
    filled = [(int(row["step"]), row["epoch"], sorted(k for k in ("loss_step", "loss_epoch", "val_loss") if row[k]))
              for row in table]
    assert filled == [
        (4, "0", ["loss_step"]), (5, "0", ["val_loss"]), (5, "0", ["loss_epoch"]),
        (9, "1", ["loss_step"]), (11, "1", ["val_loss"]), (11, "1", ["loss_epoch"]),
    ]


def test_layout_versions_and_values():
    logger = CSVLogger("logs", name="exp")
    trainer = quiet_trainer(max_epochs=2, logger=logger, log_every_n_steps=4)
    assert trainer.log_dir == os.path.join("logs", "exp", "version_0")
    trainer.fit(EveryKind(), loader(), loader(n=16))
    assert sorted(os.listdir(logger.log_dir)) == ["hparams.yaml", "metrics.csv"]
    table = rows(logger.metrics_file)
    assert list(table[0]) == ["epoch", "loss_epoch", "loss_step", "step", "step_only", "val_loss"]
    step_rows = [row for row in table if row["loss_step"]]
    assert [(int(r["step"]), float(r["step_only"])) for r in step_rows] == [(3, 3.0), (7, 7.0), (11, 3.0), (15, 7.0)]
    val_rows = [row for row in table if row["val_loss"]]
    assert [int(r["step"]) for r in val_rows] == [7, 15]  # at the step of the training batch validation followed
    assert trainer.callback_metrics["val_loss"].item() == pytest.approx(float(val_rows[-1]["val_loss"]))
    assert CSVLogger("logs", name="exp").version == 1  # the next run gets the next version
    assert CSVLogger("logs", name="exp", version="final").log_dir == os.path.join("logs", "exp", "final")


def test_a_new_name_widens_the_header_without_losing_rows():
    logger = CSVLogger("grow", flush_logs_every_n_steps=1)
    logger.log_metrics({"a": 1.0}, step=0)
    logger.log_metrics({"a": 2.0}, step=1)
    logger.log_metrics({"b": 3.0}, step=2)
    logger.log_metrics({"a": 4.0, "b": 5.0}, step=3)
    assert rows(logger.metrics_file) == [
        {"a": "1.0", "b": "", "step": "0"}, {"a": "2.0", "b": "", "step": "1"},
        {"a": "", "b": "3.0", "step": "2"}, {"a": "4.0", "b": "5.0", "step": "3"},
    ]


def test_rows_are_buffered_until_a_flush():
    logger = CSVLogger("buffer", flush_logs_every_n_steps=10)
    for step in range(5):
        logger.log_metrics({"x": float(step)}, step)
    assert not os.path.exists(logger.metrics_file)
    logger.log_metrics({"x": 9.0}, 9)
    assert len(rows(logger.metrics_file)) == 6


def test_hyperparameters_go_to_hparams_yaml():
    logger = CSVLogger("hp")
    quiet_trainer(max_epochs=1, logger=logger).fit(Regressor(lr=0.02, features=4), loader())
    with open(os.path.join(logger.log_dir, "hparams.yaml")) as handle:
        assert yaml.safe_load(handle) == {"lr": 0.02, "features": 4}


class Plain(Regressor):
    def __init__(self):
        super().__init__()
        self._log_hyperparams = False  # as a Module that never called save_hyperparameters


def test_hparams_yaml_is_sorted_plain_and_only_there_once_hyperparameters_were_logged():
    logger = CSVLogger("plain")
    quiet_trainer(max_epochs=1, logger=logger).fit(Plain(), loader())
    assert not os.path.exists(os.path.join(logger.log_dir, "hparams.yaml"))  # as Lightning's CSVLogger
    direct = CSVLogger("direct")
    direct.log_hyperparams(argparse.Namespace(zeta=1, alpha=(1, 2), beta=None, path=pathlib.PurePosixPath("/d")))
    direct.save()
    with open(os.path.join(direct.log_dir, "hparams.yaml")) as handle:
        text = handle.read()
    assert [line.split(":")[0] for line in text.splitlines() if not line.startswith("-")] == [
        "alpha", "beta", "path", "zeta"]  # alphabetical, as Lightning writes it
    assert yaml.safe_load(text) == {"alpha": [1, 2], "beta": None, "path": "PurePosixPath('/d')", "zeta": 1}
    with pytest.raises(MisconfigurationError, match=r"log_hyperparams\(params=3 \(type int\)\): accepted is a dict"):
        direct.log_hyperparams(3)


def test_only_hyperparameters_asked_for_are_logged_and_initial_values_win():
    class Data(DataModule):
        def __init__(self, batch=8, secret=1):
            super().__init__()
            self.save_hyperparameters(ignore="secret")

        def train_dataloader(self):
            return loader()

    class Changes(Regressor):
        def on_fit_start(self):
            self.hparams.lr = 99.0  # hparams_initial is what the loggers get, as Lightning

    logger = CSVLogger("both")
    quiet_trainer(max_epochs=1, logger=logger).fit(Changes(lr=0.5), datamodule=Data())
    with open(os.path.join(logger.log_dir, "hparams.yaml")) as handle:
        assert yaml.safe_load(handle) == {"lr": 0.5, "features": 4, "batch": 8}
    quiet = CSVLogger("quiet")

    class NotLogged(Data):
        def __init__(self):
            super().__init__()
            self.save_hyperparameters(logger=False)

    quiet_trainer(max_epochs=1, logger=quiet).fit(Changes(lr=0.5), datamodule=NotLogged())
    with open(os.path.join(quiet.log_dir, "hparams.yaml")) as handle:
        assert yaml.safe_load(handle) == {"lr": 0.5, "features": 4}


def test_any_fsspec_path_works():
    root = f"memory://csv-{uuid.uuid4().hex}"
    logger = CSVLogger(root)
    quiet_trainer(max_epochs=1, logger=logger, log_every_n_steps=2).fit(Regressor(), loader())
    assert [int(row["step"]) for row in rows(logger.metrics_file)] == [1, 3, 5, 7]
    fsspec.filesystem("memory").rm(root.replace("memory://", "/"), recursive=True)


def test_a_crash_leaves_a_readable_file_with_every_row_logged_before_it():
    class Crashes(EveryKind):
        def training_step(self, batch, batch_idx):
            if self.current_epoch == 1 and batch_idx == 5:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    logger = CSVLogger("crash")
    with pytest.raises(RuntimeError, match="boom"):
        quiet_trainer(max_epochs=3, logger=logger, log_every_n_steps=2).fit(Crashes(), loader())
    table = rows(logger.metrics_file)
    assert [int(r["step"]) for r in table if r["loss_step"]] == [1, 3, 5, 7, 9, 11]
    assert all(len(r) == len(table[0]) for r in table)


def test_a_run_reusing_a_version_replaces_its_metrics():
    first = CSVLogger("again", version=0, flush_logs_every_n_steps=1)
    first.log_metrics({"x": 1.0}, 0)
    second = CSVLogger("again", version=0, flush_logs_every_n_steps=1)
    with pytest.warns(UserWarning, match=r"Experiment logs directory .*version_0 exists and is not empty"):
        second.log_metrics({"y": 2.0}, 0)
    assert rows(second.metrics_file) == [{"step": "0", "y": "2.0"}]


def test_a_version_folder_holding_any_file_is_warned_about_and_a_new_one_is_not(tmp_path):
    named = tmp_path / "exp" / "my_run"
    named.mkdir(parents=True)
    (named / "notes.txt").write_text("an earlier run's")
    logger = CSVLogger(tmp_path, name="exp", version="my_run")  # a string version names the folder as given
    assert logger.log_dir == str(named)
    with pytest.warns(UserWarning, match="exists and is not empty"):
        logger.log_metrics({"x": 1.0}, 0)
        logger.save()
    fresh = CSVLogger(tmp_path, name="exp")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fresh.log_hyperparams()  # callable without params, as Lightning's
        fresh.log_metrics({"x": 1.0}, 0)
        assert fresh.experiment.metrics == [{"x": 1.0, "step": 0}]  # buffered rows, as Lightning's writer keeps them
        fresh.save()
    assert fresh.experiment.metrics == [] and fresh.metrics_keys == ["step", "x"]


def test_enable_autolog_hparams_false_logs_no_hyperparameters_but_metrics_still():
    logger = CSVLogger("off")
    quiet_trainer(max_epochs=1, logger=logger, log_every_n_steps=1, enable_autolog_hparams=False).fit(
        Regressor(lr=0.5), loader())
    assert not os.path.exists(os.path.join(logger.log_dir, "hparams.yaml"))
    assert "train_loss" in logger.metrics_keys
    with pytest.raises(MisconfigurationError, match="enable_autolog_hparams"):
        quiet_trainer(enable_autolog_hparams="no")


def test_reusing_a_version_folder_warns_and_moves_its_metrics_aside_until_the_run_succeeds(tmp_path):
    # Lightning deletes the earlier metrics.csv when logger.experiment is first read; we move it aside instead, so
    # a run that fails loses no earlier log, and delete it once the new run ends well.
    folder = tmp_path / "exp" / "version_0"
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text("step,x\n0,1.0\n")
    (folder / "hparams.yaml").write_text("lr: 0.1\n")
    logger = CSVLogger(tmp_path, name="exp", version=0)
    with pytest.warns(UserWarning, match=r"Experiment logs directory .*version_0 exists and is not empty"):
        assert logger.experiment is logger
    assert sorted(os.listdir(folder)) == ["hparams.yaml.previous", "metrics.csv.previous"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _ = logger.experiment  # the folder is claimed once
    logger.log_metrics({"y": 2.0}, 0)
    logger.finalize("failed")
    assert sorted(os.listdir(folder)) == ["hparams.yaml.previous", "metrics.csv", "metrics.csv.previous"]
    assert (folder / "metrics.csv.previous").read_text() == "step,x\n0,1.0\n"

    again = CSVLogger(tmp_path, name="exp", version=0)
    with pytest.warns(UserWarning, match="exists and is not empty"):
        again.log_hyperparams({"lr": 0.2})
    assert (folder / "metrics.csv.previous-1").read_text() == "step,y\n0,2.0\n"  # the failed run's, kept too
    again.log_metrics({"z": 3.0}, 0)
    again.finalize("success")
    assert sorted(os.listdir(folder)) == ["hparams.yaml", "hparams.yaml.previous", "metrics.csv",
                                          "metrics.csv.previous"]  # only what this run moved aside is deleted
    assert rows(again.metrics_file) == [{"step": "0", "z": "3.0"}]


def test_log_hyperparams_writes_hparams_yaml_at_once_in_the_named_or_nameless_folder(tmp_path):
    named = CSVLogger(tmp_path, name="exp", version="2020-02-05-162402")
    named.log_hyperparams({"a": 1, "b": 2})
    assert os.listdir(tmp_path / "exp") == ["2020-02-05-162402"]
    with open(tmp_path / "exp" / "2020-02-05-162402" / "hparams.yaml") as handle:
        assert yaml.safe_load(handle) == {"a": 1, "b": 2}
    for name in (None, ""):
        nameless = CSVLogger(tmp_path / f"nameless-{name}", name=name)
        nameless.log_hyperparams()  # with nothing: an empty file, as Lightning's
        assert nameless.root_dir == str(tmp_path / f"nameless-{name}")
        assert os.listdir(tmp_path / f"nameless-{name}" / "version_0") == ["hparams.yaml"]
        assert (tmp_path / f"nameless-{name}" / "version_0" / "hparams.yaml").read_text().strip() == "{}"
    assert CSVLogger(tmp_path, name="exp").version == 0  # a string version is no version_<n>


class LogsFromEveryRank(Regressor):
    def on_train_start(self):
        experiment = self.logger.experiment
        self.seen = (type(experiment).__name__, experiment.something(foo="bar") if self.global_rank else None)
        self.logger.log_hyperparams({f"rank{self.global_rank}": 1})
        self.logger.log_metrics({f"from_rank{self.global_rank}": 1.0}, step=0)
        self.logger.save()


def _csv_on_rank(rank: int, directory: str):
    model = LogsFromEveryRank()
    quiet_trainer(devices=2, strategy="ddp", max_steps=1, logger=CSVLogger(directory)).fit(model, loader())
    return model.seen


def test_on_other_ranks_the_experiment_does_nothing_and_only_rank_zero_writes(tmp_path):
    assert spawn(2, _csv_on_rank, str(tmp_path)) == [("CSVLogger", None), ("NoOpExperiment", None)]
    folder = tmp_path / "lightning_logs" / "version_0"
    assert sorted(os.listdir(tmp_path / "lightning_logs")) == ["version_0"]
    assert yaml.safe_load((folder / "hparams.yaml").read_text()) == {"rank0": 1, "lr": 0.05, "features": 4}
    assert "from_rank0" in rows(folder / "metrics.csv")[0] and "from_rank1" not in rows(folder / "metrics.csv")[0]
