"""``Checkpoint`` (the base of checkpoint-saving callbacks) and ``OnExceptionCheckpoint``."""

from __future__ import annotations

import pytest
import torch

import framework
from framework.callbacks import Checkpoint, ModelCheckpoint, OnExceptionCheckpoint
from framework.errors import MisconfigurationError
from tests.helpers import Regressor, loader, quiet_trainer


class FailsAt(Regressor):
    def __init__(self, step: int | None) -> None:
        super().__init__()
        self.fail_at = step

    def training_step(self, batch, batch_idx):
        if self.trainer.global_step == self.fail_at:
            raise ValueError("stopped here")
        return super().training_step(batch, batch_idx)


def test_a_crash_in_fit_leaves_a_checkpoint_at_the_failing_step_to_resume_from(tmp_path):
    saver = OnExceptionCheckpoint(dirpath=tmp_path)
    trainer = quiet_trainer(max_epochs=2, callbacks=[saver], enable_checkpointing=True)
    assert trainer.checkpoint_callbacks == [saver]  # a Checkpoint given: no default ModelCheckpoint, as in Lightning
    model = FailsAt(11)
    with pytest.raises(ValueError, match="stopped here"):
        trainer.fit(model, loader())
    assert saver.ckpt_path == str(tmp_path / "on_exception.ckpt")
    saved = torch.load(saver.ckpt_path, weights_only=False)
    assert saved["global_step"] == 11 and saved["epoch"] == 1

    model.fail_at = None
    resumed = quiet_trainer(max_epochs=2)
    resumed.fit(model, loader(), ckpt_path=saver.ckpt_path)
    assert resumed.global_step == 16  # the 5 steps left after step 11


def test_nothing_is_saved_outside_fit_and_contradicting_flags_are_refused(tmp_path):
    saver = OnExceptionCheckpoint(dirpath=tmp_path, filename="crash")

    class FailsInValidation(Regressor):
        def validation_step(self, batch, batch_idx):
            raise ValueError("broken validation")

    with pytest.raises(ValueError, match="broken validation"):
        trainer = quiet_trainer(callbacks=[saver], enable_checkpointing=True)
        trainer.validate(FailsInValidation(), loader(n=8), verbose=False)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(MisconfigurationError, match=r"enable_checkpointing=False\) was given together with "
                                                    r"OnExceptionCheckpoint"):
        quiet_trainer(callbacks=[saver])
    with pytest.raises(MisconfigurationError, match=r"OnExceptionCheckpoint\(filename=''"):
        OnExceptionCheckpoint(dirpath=tmp_path, filename="")


def test_a_checkpoint_subclass_runs_after_the_other_callbacks_and_model_checkpoint_is_one():
    order = []

    class Saves(Checkpoint):
        def on_train_epoch_end(self, trainer, pl_module):
            order.append("checkpoint")

    class Other(framework.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            order.append("other")

    trainer = quiet_trainer(max_epochs=1, callbacks=[Saves(), Other()], enable_checkpointing=True)
    trainer.fit(Regressor(), loader())
    assert order == ["other", "checkpoint"]
    assert issubclass(ModelCheckpoint, Checkpoint)
