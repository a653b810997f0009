"""MLFlowLogger against the real MLflow: a local store read back through MLflow's own client."""

from __future__ import annotations

import os
import sys

import pytest
import yaml

from framework.callbacks import ModelCheckpoint
from framework.errors import MisconfigurationError, MissingPackageError
from framework.loggers import MLFlowLogger
from tests.helpers import RecordingLogger, Regressor, loader, quiet_trainer

mlflow = pytest.importorskip("mlflow", reason="the dev extra installs mlflow-skinny")


@pytest.fixture(autouse=True)
def _local_store_only(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)


def client_of(logger):
    return logger.experiment  # its own client: made here, after ranks that ran elsewhere, it connects as they did


def history(logger, key):
    return [(metric.step, metric.value) for metric in client_of(logger).get_metric_history(logger.run_id, key)]


class Nested(Regressor):
    def __init__(self, lr=0.05, schedule=None):
        super().__init__(lr=lr)
        self.save_hyperparameters()


def test_a_fit_lands_in_the_run_as_a_plain_logger_saw_it(tmp_path):
    logger, reference = MLFlowLogger(experiment_name="digits", save_dir=tmp_path / "mlruns"), RecordingLogger()
    trainer = quiet_trainer(max_epochs=2, logger=[logger, reference], log_every_n_steps=2, enable_checkpointing=True)
    trainer.fit(Nested(schedule={"kind": "cosine", "warmup": 3}), loader(), loader(n=16))

    for key in ("train_loss", "val_loss", "epoch"):
        expected = [(step, metrics[key]) for step, metrics in reference.calls if key in metrics]
        assert history(logger, key) == expected
    run = client_of(logger).get_run(logger.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params == {"lr": "0.05", "schedule/kind": "cosine", "schedule/warmup": "3"}
    assert client_of(logger).get_experiment(logger.experiment_id).name == "digits"
    # Lightning's places: the store for log_dir, <store>/<experiment id>/<run id>/checkpoints for checkpoints
    assert trainer.log_dir == str(tmp_path / "mlruns")
    assert os.path.dirname(trainer.checkpoint_callback.best_model_path) == os.path.join(
        tmp_path, "mlruns", logger.experiment_id, logger.run_id, "checkpoints")


def test_the_next_run_of_the_trainer_goes_on_in_the_same_mlflow_run_and_a_new_logger_makes_a_new_one(tmp_path):
    logger = MLFlowLogger(save_dir=tmp_path / "mlruns", run_name="first")
    trainer = quiet_trainer(max_epochs=1, logger=logger, log_every_n_steps=1)
    trainer.fit(Regressor(), loader())
    trainer.test(Regressor(), loader(n=16), verbose=False)
    assert [value for _, value in history(logger, "test_loss")] and history(logger, "train_loss")
    assert client_of(logger).get_run(logger.run_id).info.run_name == "first"

    again = MLFlowLogger(save_dir=tmp_path / "mlruns")
    quiet_trainer(max_epochs=1, logger=again).fit(Regressor(), loader())
    assert again.experiment_id == logger.experiment_id and again.run_id != logger.run_id
    resumed = MLFlowLogger(save_dir=tmp_path / "mlruns", run_id=logger.run_id)
    quiet_trainer(max_epochs=1, logger=resumed).validate(Regressor(), loader(n=16), verbose=False)
    assert history(resumed, "val_loss") and resumed.experiment_id == logger.experiment_id


def test_log_model_uploads_the_best_and_last_checkpoints_with_their_metadata(tmp_path):
    logger = MLFlowLogger(save_dir=tmp_path / "mlruns", log_model=True)
    checkpoint = ModelCheckpoint(monitor="val_loss", save_top_k=1, save_last=True)
    trainer = quiet_trainer(max_epochs=3, logger=logger, callbacks=[checkpoint], enable_checkpointing=True)
    trainer.fit(Regressor(), loader(), loader(n=16))
    client = client_of(logger)
    folders = {entry.path for entry in client.list_artifacts(logger.run_id)}
    best = os.path.splitext(os.path.basename(checkpoint.best_model_path))[0]
    assert folders == {best, "last"}
    downloaded = client.download_artifacts(logger.run_id, best, str(tmp_path / "down"))
    assert sorted(os.listdir(downloaded)) == sorted([os.path.basename(checkpoint.best_model_path), "aliases.txt",
                                                     "metadata.yaml"])
    metadata = yaml.safe_load(open(os.path.join(downloaded, "metadata.yaml")))
    assert metadata["score"] == pytest.approx(float(checkpoint.best_model_score))
    assert metadata["Checkpoint"]["monitor"] == "val_loss"
    assert open(os.path.join(downloaded, "aliases.txt")).read() == "['latest', 'best']"


def test_log_model_all_uploads_each_checkpoint_when_it_is_saved(tmp_path):
    logger = MLFlowLogger(save_dir=tmp_path / "mlruns", log_model="all")
    trainer = quiet_trainer(max_epochs=3, logger=logger, callbacks=[ModelCheckpoint(save_top_k=-1)],
                            enable_checkpointing=True)
    trainer.fit(Regressor(), loader())
    folders = {entry.path for entry in client_of(logger).list_artifacts(logger.run_id)}
    assert folders == {"epoch=0-step=8", "epoch=1-step=16", "epoch=2-step=24"}


def test_a_failed_fit_marks_the_run_failed(tmp_path):
    class Fails(Regressor):
        def training_step(self, batch, batch_idx):
            if self.global_step == 3:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    logger = MLFlowLogger(save_dir=tmp_path / "mlruns")
    with pytest.raises(RuntimeError, match="boom"):
        quiet_trainer(max_epochs=1, logger=logger, log_every_n_steps=1).fit(Fails(), loader())
    assert client_of(logger).get_run(logger.run_id).info.status == "FAILED"
    assert [step for step, _ in history(logger, "train_loss")] == [0, 1, 2]


def test_prefix_names_mlflow_refuses_and_string_values(tmp_path):
    logger = MLFlowLogger(save_dir=tmp_path / "mlruns", prefix="run")
    with pytest.warns(RuntimeWarning, match=r"Replacing run-acc@top\(1\) with run-acctop1"):
        logger.log_metrics({"acc@top(1)": 0.5}, step=4)
    with pytest.warns(UserWarning, match="string value run-note=hello"):
        logger.log_metrics({"note": "hello", "loss": 1.5})
    assert history(logger, "run-acctop1") == [(4, 0.5)] and history(logger, "run-loss") == [(0, 1.5)]


def test_the_tracking_uri_comes_from_the_argument_then_the_environment(tmp_path, monkeypatch):
    store = tmp_path / "elsewhere"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{store}")
    assert MLFlowLogger().save_dir == str(store)
    assert MLFlowLogger(tracking_uri=f"file://{tmp_path}/given").save_dir == f"{tmp_path}/given"
    assert MLFlowLogger(tracking_uri="http://mlflow.internal:5000").save_dir is None


def test_bad_arguments_and_a_missing_mlflow_are_named(monkeypatch):
    with pytest.raises(MisconfigurationError, match=r"MLFlowLogger\(log_model='best'"):
        MLFlowLogger(log_model="best")
    with pytest.raises(MisconfigurationError, match=r"save_dir=None\) needs a tracking_uri"):
        MLFlowLogger(save_dir=None)
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(MissingPackageError, match=r'MLFlowLogger needs mlflow.*pip install "framework\[mlflow\]"'):
        MLFlowLogger()


def test_on_two_ranks_one_run_is_made_and_both_ranks_use_it(tmp_path):
    logger = MLFlowLogger(save_dir=tmp_path / "mlruns")
    trainer = quiet_trainer(devices=2, max_epochs=1, logger=logger, enable_checkpointing=True, log_every_n_steps=1)
    trainer.fit(Regressor(), loader())
    experiment = client_of(logger).get_experiment(logger.experiment_id)
    runs = client_of(logger).search_runs([experiment.experiment_id])
    assert [run.info.run_id for run in runs] == [logger.run_id]
    assert [step for step, _ in history(logger, "train_loss")] == [0, 1, 2, 3]  # 8 batches over 2 ranks
    assert trainer.checkpoint_callback.dirpath == os.path.join(tmp_path, "mlruns", logger.experiment_id,
                                                               logger.run_id, "checkpoints")
    assert os.listdir(trainer.checkpoint_callback.dirpath) == ["epoch=0-step=4.ckpt"]
