"""TensorBoardLogger: scalars and hyperparameters read back with tensorboard's own EventAccumulator."""

from __future__ import annotations

import os
import pickle
import uuid

import fsspec
import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from framework.callbacks import Callback
from framework.loggers import TensorBoardLogger
from framework.testing import spawn
from tests.helpers import RecordingLogger, Regressor, loader, quiet_trainer
from tests.loggers.test_csv import EveryKind, Plain


class Tee(RecordingLogger):
    pass


def events(log_dir):
    accumulator = EventAccumulator(log_dir, size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def test_scalars_have_the_steps_and_values_the_trainer_logged():
    logger, reference = TensorBoardLogger("tb"), Tee()
    trainer = quiet_trainer(max_epochs=2, logger=[logger, reference], log_every_n_steps=4)
    trainer.fit(EveryKind(), loader(), loader(n=16))
    scalars = events(logger.log_dir)
    for key in ("loss_step", "loss_epoch", "step_only", "val_loss", "epoch"):
        expected = [(step, metrics[key]) for step, metrics in reference.calls if key in metrics]
        seen = [(event.step, event.value) for event in scalars.Scalars(key)]
        assert [step for step, _ in seen] == [step for step, _ in expected], key
        assert [value for _, value in seen] == pytest.approx([value for _, value in expected], rel=1e-6), key
    assert [e.step for e in scalars.Scalars("loss_step")] == [3, 7, 11, 15]


def test_hyperparameters_reach_the_hparams_tab_and_yaml():
    logger = TensorBoardLogger("hp", name="exp", version=3)
    quiet_trainer(max_epochs=1, logger=logger).fit(Regressor(lr=0.02), loader())
    assert logger.log_dir == os.path.join("hp", "exp", "version_3")
    with open(os.path.join(logger.log_dir, "hparams.yaml")) as handle:
        assert yaml.safe_load(handle) == {"lr": 0.02, "features": 4}
    scalars = events(logger.log_dir)
    assert [(e.step, e.value) for e in scalars.Scalars("hp_metric")] == [(0, -1.0)]  # Lightning's default
    plugin = scalars.PluginTagToContent("hparams")
    assert "_hparams_/session_start_info" in plugin and b"lr" in plugin["_hparams_/session_start_info"]


def test_log_hyperparams_called_directly_as_lightning_accepts_it():
    logger = TensorBoardLogger("direct")
    logger.log_hyperparams({"a": 1}, metrics=0.5, step=3)
    logger.log_metrics({"x": 2.0})  # no step: TensorBoard's step 0
    logger.save()
    scalars = events(logger.log_dir)
    assert [(e.step, e.value) for e in scalars.Scalars("hp_metric")] == [(3, 0.5)]
    assert [(e.step, e.value) for e in scalars.Scalars("x")] == [(0, 2.0)]
    silent = TensorBoardLogger("silent", default_hp_metric=False)
    quiet_trainer(max_epochs=1, logger=silent).fit(Regressor(lr=0.02), loader())
    scalars = events(silent.log_dir)
    assert "hp_metric" not in scalars.Tags()["scalars"]
    with pytest.raises(KeyError, match="hparams"):  # no HPARAMS-tab entry at all
        scalars.PluginTagToContent("hparams")
    with open(os.path.join(silent.log_dir, "hparams.yaml")) as handle:
        assert yaml.safe_load(handle) == {"lr": 0.02, "features": 4}  # the file still has them
    plain = TensorBoardLogger("plain")
    quiet_trainer(max_epochs=1, logger=plain).fit(Plain(), loader())
    with open(os.path.join(plain.log_dir, "hparams.yaml")) as handle:
        assert yaml.safe_load(handle) == {}  # TensorBoardLogger writes it anyway, as Lightning's


def test_versions_count_up_and_the_trainer_log_dir_follows():
    first = quiet_trainer(max_epochs=1, logger=TensorBoardLogger("runs"))
    second = quiet_trainer(max_epochs=1, logger=TensorBoardLogger("runs"))
    first.fit(Regressor(), loader())
    assert first.log_dir == os.path.join("runs", "lightning_logs", "version_0")
    assert second.log_dir == os.path.join("runs", "lightning_logs", "version_1")


def test_the_graph_is_logged_when_asked():
    class WithExample(Regressor):
        def __init__(self):
            super().__init__()
            self.example_input_array = torch.randn(2, 4)

    logger = TensorBoardLogger("graph", log_graph=True)
    quiet_trainer(max_epochs=1, logger=logger).fit(WithExample(), loader())
    assert events(logger.log_dir).Graph() is not None


def test_the_default_logger_is_tensorboard_under_lightning_logs():
    trainer = quiet_trainer(max_epochs=1, logger=True)
    assert [type(logger).__name__ for logger in trainer.loggers] == ["TensorBoardLogger"]
    trainer.fit(Regressor(), loader())
    assert trainer.log_dir == os.path.join(os.getcwd(), "lightning_logs", "version_0")
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(trainer.log_dir))


def test_event_files_and_hparams_go_through_fsspec_to_memory():
    root = f"memory://tb-{uuid.uuid4().hex}"
    logger = TensorBoardLogger(root, name="run")
    trainer = quiet_trainer(max_epochs=1, logger=logger, log_every_n_steps=2)
    trainer.fit(Regressor(lr=0.25), loader())
    memory = fsspec.filesystem("memory")
    names = sorted(os.path.basename(path) for path in memory.find(root.replace("memory://", "/")))
    assert names[0].startswith("events.out.tfevents.") and names[1:] == ["hparams.yaml"]
    assert [event.step for event in events(logger.log_dir).Scalars("train_loss")] == [1, 3, 5, 7]
    with memory.open(f"{logger.log_dir.replace('memory://', '/')}/hparams.yaml") as handle:
        assert yaml.safe_load(handle) == {"lr": 0.25, "features": 4}
    memory.rm(root.replace("memory://", "/"), recursive=True)


def test_log_dir_is_built_from_the_name_and_version_properties_with_user_and_variables_expanded(tmp_path, monkeypatch):
    class Renamed(TensorBoardLogger):
        @property
        def name(self):
            return "name"

        @property
        def version(self):
            return "version"

    assert Renamed(tmp_path / "logs").log_dir == os.path.join(tmp_path, "logs", "name", "version")
    assert Renamed(tmp_path, sub_dir="sub").log_dir == os.path.join(tmp_path, "name", "version", "sub")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LOGS_ROOT", str(tmp_path / "var"))
    assert Renamed("~/tb", sub_dir="sub").log_dir == os.path.join(tmp_path, "home", "tb", "name", "version", "sub")
    (tmp_path / "var" / "tb" / "lightning_logs" / "version_4").mkdir(parents=True)
    logger = TensorBoardLogger("$LOGS_ROOT/tb")
    assert logger.save_dir == "$LOGS_ROOT/tb"  # as given, as Lightning keeps it
    assert logger.version == 5  # the versions are counted where the runs really are
    assert quiet_trainer(logger=logger).log_dir == os.path.join(tmp_path, "var", "tb", "lightning_logs", "version_5")


def test_log_graph_traces_a_model_no_trainer_runs_and_warns_where_it_cannot(tmp_path):
    model = Regressor()
    logger = TensorBoardLogger(tmp_path, log_graph=True)
    logger.log_graph(model, torch.randn(2, 4))
    logger.save()
    assert events(logger.log_dir).Graph() is not None
    with pytest.raises(RuntimeError, match="not attached to a Trainer"):
        _ = model.trainer  # only while tracing does it answer None
    with pytest.warns(UserWarning, match=r"Could not log computational graph to TensorBoard: .*was not given"):
        logger.log_graph(model)
    model.example_input_array = {"x": torch.randn(2, 4)}
    with pytest.warns(UserWarning, match=r"type <class 'dict'>.* can't be traced by TensorBoard"):
        logger.log_graph(model)
    TensorBoardLogger(tmp_path / "off").log_graph(model)  # log_graph=False: nothing, no warning
    assert not os.path.exists(tmp_path / "off")


def test_a_logger_whose_writer_exists_pickles_alone_and_inside_a_trainer(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics({"a": 1.0}, 0)
    logger.save()
    copy = pickle.loads(pickle.dumps(logger))
    copy.log_metrics({"b": 2.0}, 1)  # a writer of its own is made in the same folder
    copy.finalize("success")
    assert copy.log_dir == logger.log_dir and [e.value for e in events(logger.log_dir).Scalars("b")] == [2.0]
    trainer = pickle.loads(pickle.dumps(quiet_trainer(logger=logger)))
    assert trainer.logger.log_dir == logger.log_dir
    trainer.logger.log_metrics({"acc": 1.0}, 2)


class CheckExperiment(Callback):
    def setup(self, trainer, pl_module, stage):  # as in Lightning: rank 0's writer exists (its folder too) by now
        self.folder_at_setup = os.path.isdir(trainer.logger.log_dir)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        experiment = trainer.logger.experiment
        self.seen = (type(experiment).__name__, experiment.add_text("note", f"rank {trainer.global_rank}"))
        trainer.logger.log_metrics({f"from_rank{trainer.global_rank}": 1.0}, step=0)


def _tensorboard_on_rank(rank: int, directory: str):
    check = CheckExperiment()
    quiet_trainer(devices=2, strategy="ddp", max_steps=1, logger=TensorBoardLogger(directory),
                  callbacks=[check]).fit(Regressor(), loader())
    return check.seen, check.folder_at_setup


def test_on_other_ranks_the_experiment_does_nothing_and_only_rank_zero_writes_events(tmp_path):
    assert spawn(2, _tensorboard_on_rank, str(tmp_path)) == [(("SummaryWriter", None), True),
                                                             (("NoOpExperiment", None), True)]
    log_dir = os.path.join(tmp_path, "lightning_logs", "version_0")
    assert len([name for name in os.listdir(log_dir) if name.startswith("events.out.tfevents")]) == 1
    scalars = events(log_dir).Tags()["scalars"]
    assert "from_rank0" in scalars and "from_rank1" not in scalars
