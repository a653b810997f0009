"""ModelCheckpoint's files and directories: checked writable at setup (leaving nothing behind), what a killed
run left removed."""

from __future__ import annotations

import os

import pytest

from framework.callbacks import ModelCheckpoint
from framework.errors import MisconfigurationError
from tests.helpers import Regressor, loader, quiet_trainer


def test_an_unwritable_directory_fails_before_training():
    open("a_file", "w").close()
    trained = []

    class Watches(Regressor):
        def training_step(self, batch, batch_idx):
            trained.append(batch_idx)
            return super().training_step(batch, batch_idx)

    checkpoint = ModelCheckpoint(dirpath=os.path.join("a_file", "checkpoints"))
    with pytest.raises(MisconfigurationError, match=r"cannot write to dirpath='.*a_file.checkpoints'"):
        quiet_trainer(max_epochs=1, callbacks=[checkpoint], enable_checkpointing=True).fit(Watches(), loader())
    assert trained == []


def test_the_directory_appears_with_the_first_checkpoint_not_at_setup():
    ModelCheckpoint(dirpath=os.path.join("a", "b", "checkpoints")).setup(quiet_trainer(), Regressor(), "fit")
    os.makedirs("kept")
    ModelCheckpoint(dirpath=os.path.join("kept", "checkpoints")).setup(quiet_trainer(), Regressor(), "fit")
    assert sorted(os.listdir()) == ["kept"] and os.listdir("kept") == []  # checked writable, then left as it was


def test_unfinished_writes_of_a_killed_run_are_removed_and_other_files_kept(caplog):
    os.makedirs("run")
    left = ["last.ckpt.tmp-0123abcd", "epoch=0-step=3.ckpt.tmp-89abcdef"]
    kept = ["notes.txt.tmp-0123abcd", "last.ckpt.tmp-backup"]
    for name in left + kept:
        with open(os.path.join("run", name), "wb") as file:
            file.write(b"PK\x03\x04 cut off")
    trainer = quiet_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[ModelCheckpoint(dirpath="run")])
    trainer.fit(Regressor(), loader())
    assert sorted(os.listdir("run")) == sorted(["epoch=0-step=8.ckpt", *kept])
    assert "Removed 2 unfinished checkpoint write(s)" in caplog.text
