"""ModelCheckpoint's file names: templates filled in, version suffixes on clashes."""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

from framework.callbacks import ModelCheckpoint
from tests.helpers import Regressor, loader, quiet_trainer


def test_file_names_from_templates():
    d = os.path.realpath("d")  # a local dirpath is reported absolute, as Lightning does
    checkpoint = ModelCheckpoint(dirpath="d", filename="{epoch}-{val_metric:.2f}")
    assert checkpoint.dirpath == d
    assert checkpoint.format_checkpoint_name({"epoch": 3, "val_metric": torch.tensor(0.999)}) == os.path.join(
        d, "epoch=3-val_metric=1.00.ckpt")  # the name COMPAT.md records from Lightning
    plain = ModelCheckpoint(dirpath="d", filename="run-{epoch:02d}", auto_insert_metric_name=False)
    assert plain.format_checkpoint_name({"epoch": torch.tensor(7)}) == os.path.join(d, "run-07.ckpt")
    default = ModelCheckpoint(dirpath="d")
    assert default.format_checkpoint_name({"epoch": 1, "step": 20}) == os.path.join(d, "epoch=1-step=20.ckpt")
    assert default.format_checkpoint_name({"epoch": 1, "step": 20}, ver=2) == os.path.join(
        d, "epoch=1-step=20-v2.ckpt")
    assert ModelCheckpoint(dirpath="memory://ckpts").dirpath == "memory://ckpts"


def test_the_joining_characters_can_be_changed_on_an_instance():
    checkpoint = ModelCheckpoint(dirpath="d", filename="{epoch}-{acc:.1f}")
    checkpoint.CHECKPOINT_JOIN_CHAR, checkpoint.CHECKPOINT_EQUALS_CHAR = "@", ":"
    assert os.path.basename(checkpoint.format_checkpoint_name({"epoch": 3, "acc": 0.25}, ver=1)) == \
        "epoch:3-acc:0.2@v1.ckpt"
    assert ModelCheckpoint.CHECKPOINT_JOIN_CHAR == "-"


def test_a_name_clash_gets_a_version_suffix():
    for _ in range(2):
        checkpoint = ModelCheckpoint(dirpath="clash", filename="same", save_last=True)
        with pytest.warns(UserWarning, match="exists and holds checkpoints") if os.path.exists("clash") else \
                contextlib.nullcontext():
            quiet_trainer(max_epochs=1, callbacks=[checkpoint], enable_checkpointing=True).fit(Regressor(), loader())
    assert sorted(os.listdir("clash")) == ["last-v1.ckpt", "last.ckpt", "same-v1.ckpt", "same.ckpt"]
    assert checkpoint.best_model_path.endswith("same-v1.ckpt") and checkpoint.last_model_path.endswith("last-v1.ckpt")
    assert checkpoint.find_last_checkpoints() == [os.path.realpath(os.path.join("clash", name))
                                                  for name in ("last-v1.ckpt", "last.ckpt")]
