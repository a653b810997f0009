"""The callbacks and logger a Trainer adds by itself, and the contradictions it refuses."""

from __future__ import annotations

import importlib.util
import os

import pytest

import framework
from framework.callbacks import EarlyStopping, ModelCheckpoint, ModelSummary, TQDMProgressBar
from framework.errors import MisconfigurationError
from framework.trainer import defaults


def names(trainer):
    return [type(cb).__name__ for cb in trainer.callbacks]


def test_defaults_are_added_and_checkpointing_goes_last():
    assert names(framework.Trainer()) == ["TQDMProgressBar", "ModelSummary", "ModelCheckpoint"]
    early = EarlyStopping("val_loss")
    trainer = framework.Trainer(callbacks=[ModelCheckpoint(dirpath="x"), early])
    assert names(trainer) == ["EarlyStopping", "TQDMProgressBar", "ModelSummary", "ModelCheckpoint"]
    assert trainer.early_stopping_callback is early and trainer.early_stopping_callbacks == [early]
    assert trainer.checkpoint_callback.dirpath == os.path.realpath("x")  # the given one, not a default
    bare = framework.Trainer(enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    assert bare.callbacks == [] and bare.checkpoint_callback is None and bare.progress_bar_callback is None


def test_given_instances_replace_the_defaults():
    summary, bar = ModelSummary(max_depth=2), TQDMProgressBar(refresh_rate=5)
    trainer = framework.Trainer(callbacks=[summary, bar])
    assert trainer.callbacks[:2] == [summary, bar] and names(trainer)[2:] == ["ModelCheckpoint"]


def test_contradictions_are_refused():
    with pytest.raises(MisconfigurationError, match="enable_checkpointing=False.*ModelCheckpoint"):
        framework.Trainer(enable_checkpointing=False, callbacks=[ModelCheckpoint()])


def test_logger_true_is_tensorboard_and_falls_back_to_csv(monkeypatch):
    assert [type(lg).__name__ for lg in framework.Trainer(logger=True).loggers] == ["TensorBoardLogger"]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name))
    assert [type(lg).__name__ for lg in defaults.default_loggers("root")] == ["CSVLogger"]
    assert framework.Trainer(logger=False).loggers == []
