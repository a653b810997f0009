"""WandbLogger against the real wandb, offline: the run in this process and its files on disk."""

from __future__ import annotations

import glob
import os
import sys
import time

import pytest
import torch

from framework.callbacks import ModelCheckpoint
from framework.errors import MisconfigurationError, MissingPackageError
from framework.loggers import WandbLogger
from tests.helpers import RecordingLogger, Regressor, loader, quiet_trainer

wandb = pytest.importorskip("wandb", reason="the dev extra installs wandb")


@pytest.fixture(autouse=True)
def _offline_and_finished(monkeypatch, tmp_path):
    for name in ("WANDB_PROJECT", "WANDB_MODE", "WANDB_DIR", "WANDB_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    yield
    wandb.finish()  # the logger leaves its run open, as Lightning's does


def run_folder(save_dir, run_id):
    [folder] = glob.glob(os.path.join(save_dir, "wandb", f"offline-run-*-{run_id}"))
    return folder


CPU = torch.device("cpu")


class Callable(Regressor):
    def __init__(self, lr=0.05, activation=torch.relu, device=CPU):
        super().__init__(lr=lr)
        self.save_hyperparameters()


def test_a_fit_lands_in_an_offline_run_as_a_plain_logger_saw_it(tmp_path):
    logger, reference = WandbLogger(project="digits", save_dir=tmp_path / "runs", offline=True), RecordingLogger()
    trainer = quiet_trainer(max_epochs=2, logger=[logger, reference], log_every_n_steps=2, enable_checkpointing=True)
    trainer.fit(Callable(), loader(), loader(n=16))

    run = logger.experiment
    assert run.offline and run.project == "digits" and logger.version == run.id
    last_step, last = reference.calls[-1]
    summary = dict(run.summary)
    assert summary["trainer/global_step"] == last_step
    for key in ("train_loss", "val_loss", "epoch"):
        latest = [metrics[key] for _, metrics in reference.calls if key in metrics][-1]
        assert summary[key] == latest
    assert dict(run.config) == {"lr": 0.05, "activation": "relu", "device": "cpu"}
    assert os.path.isfile(os.path.join(run_folder(tmp_path / "runs", run.id), f"run-{run.id}.wandb"))
    # Lightning's places: the save_dir for log_dir, <save_dir>/<project>/<run id>/checkpoints for checkpoints
    assert trainer.log_dir == str(tmp_path / "runs")
    assert trainer.checkpoint_callback.dirpath == os.path.join(tmp_path, "runs", "digits", run.id, "checkpoints")


def test_test_after_fit_goes_on_in_the_same_run_and_version_or_id_names_the_run(tmp_path):
    logger = WandbLogger(offline=True, save_dir=tmp_path, version="fixed-id")
    trainer = quiet_trainer(max_epochs=1, logger=logger, log_every_n_steps=1)
    trainer.fit(Regressor(), loader())
    trainer.test(Regressor(), loader(n=16), verbose=False)
    run = logger.experiment
    assert run.id == "fixed-id" and run.project == "lightning_logs"
    assert {"train_loss", "test_loss"} <= set(run.summary.keys())


def test_a_run_already_in_progress_is_taken_over_with_a_warning(tmp_path):
    started = wandb.init(mode="offline", dir=str(tmp_path), project="mine")
    with pytest.warns(UserWarning, match="wandb run already in progress"):
        assert WandbLogger(offline=True).experiment is started


def test_prefix_dir_and_the_wandb_project_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_PROJECT", "from-env")
    logger = WandbLogger(offline=True, dir=tmp_path / "given", prefix="train", name="nice")
    logger.log_metrics({"loss": 2.0}, step=7)
    run = logger.experiment
    assert (run.project, run.name, logger.save_dir) == ("from-env", "nice", str(tmp_path / "given"))
    assert dict(run.summary)["train-loss"] == 2.0 and dict(run.summary)["trainer/global_step"] == 7
    assert run_folder(tmp_path / "given", run.id)


def test_checkpoints_become_artifacts_of_the_run(tmp_path):
    logger = WandbLogger(save_dir=tmp_path, mode="offline", log_model="all")  # offline=True refuses log_model
    checkpoint = ModelCheckpoint(save_top_k=-1)
    quiet_trainer(max_epochs=2, logger=logger, callbacks=[checkpoint], enable_checkpointing=True).fit(
        Regressor(), loader())
    assert sorted(os.path.basename(path) for path in logger._uploaded) == ["epoch=0-step=8.ckpt",
                                                                          "epoch=1-step=16.ckpt"]
    logger.experiment.finish()  # the artifacts are written into the run's file
    path = os.path.join(run_folder(tmp_path, logger.experiment.id), f"run-{logger.experiment.id}.wandb")
    record = _written(path, f"model-{logger.experiment.id}".encode())
    assert f"model-{logger.experiment.id}".encode() in record and b"model.ckpt" in record


def _written(path: str, expected: bytes, patience_s: float = 30.0) -> bytes:
    """The run file's bytes once they hold ``expected``, or as they are after ``patience_s``: W&B's service
    process may still be writing the file when ``finish()`` returns (seen on a loaded machine)."""
    deadline = time.monotonic() + patience_s
    while True:
        with open(path, "rb") as file:
            record = file.read()
        if expected in record or time.monotonic() > deadline:
            return record
        time.sleep(0.2)


def test_media_and_tables_check_their_lists(tmp_path):
    logger = WandbLogger(offline=True, save_dir=tmp_path)
    logger.log_table("preds", columns=["x", "y"], data=[[1, 2], [3, 4]], step=1)
    logger.log_image("samples", [torch.rand(3, 8, 8), torch.rand(3, 8, 8)], caption=["a", "b"])
    assert dict(logger.experiment.summary)["samples"]["count"] == 2
    with pytest.raises(TypeError, match='Expected a list as "images"'):
        logger.log_image("samples", torch.rand(3, 8, 8))
    with pytest.raises(ValueError, match="Expected 2 items but only found 1 for caption"):
        logger.log_image("samples", [torch.rand(3, 8, 8)] * 2, caption=["a"])


def test_bad_arguments_and_a_missing_wandb_are_named(monkeypatch):
    with pytest.raises(MisconfigurationError, match=r"log_model=True, offline=True\): checkpoints cannot be"):
        WandbLogger(offline=True, log_model=True)
    with pytest.raises(MisconfigurationError, match=r"WandbLogger\(log_model=2"):
        WandbLogger(log_model=2)
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(MissingPackageError, match=r'WandbLogger needs wandb.*pip install "framework\[wandb\]"'):
        WandbLogger()


def test_on_two_ranks_rank_zero_writes_the_run_and_both_use_its_id(tmp_path):
    logger = WandbLogger(offline=True, save_dir=tmp_path, project="ddp")
    trainer = quiet_trainer(devices=2, max_epochs=1, logger=logger, enable_checkpointing=True)
    trainer.fit(Regressor(), loader())
    run_id = logger._wandb_init["id"]  # rank 0's run, told to this process when the ranks ended
    assert len(glob.glob(os.path.join(tmp_path, "wandb", "offline-run-*"))) == 1
    assert run_folder(tmp_path, run_id)
    assert trainer.checkpoint_callback.dirpath == os.path.join(tmp_path, "ddp", run_id, "checkpoints")
    assert os.listdir(trainer.checkpoint_callback.dirpath) == ["epoch=0-step=4.ckpt"]
