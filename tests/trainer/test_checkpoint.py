"""Resuming fit from checkpoints written at the different points of the loop."""

from __future__ import annotations

import torch

import framework
from tests.helpers import Regressor, loader, quiet_trainer


class SaveAt(framework.Callback):
    def __init__(self, path, hook: str, batch_idx: int = -1) -> None:
        self.path, self.hook, self.batch_idx = str(path), hook, batch_idx

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self.hook == "batch" and batch_idx == self.batch_idx and trainer.current_epoch == 0:
            trainer.save_checkpoint(self.path)

    def on_validation_end(self, trainer, module):
        if self.hook == "validation" and trainer.current_epoch == 0:
            trainer.save_checkpoint(self.path)


class Counts(Regressor):
    def __init__(self):
        super().__init__()
        self.epoch_starts: list[int] = []
        self.batches = 0

    def on_train_epoch_start(self):
        self.epoch_starts.append(self.current_epoch)

    def training_step(self, batch, batch_idx):
        self.batches += 1
        return super().training_step(batch, batch_idx)


def _weights(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _resume_matches_uninterrupted(tmp_path, hook, batch_idx=-1):
    full = Counts()
    quiet_trainer(max_epochs=2, num_sanity_val_steps=0).fit(full, loader(), loader(n=16))
    path = tmp_path / "mid.ckpt"
    quiet_trainer(max_epochs=1, num_sanity_val_steps=0, callbacks=[SaveAt(path, hook, batch_idx)]).fit(
        Counts(), loader(), loader(n=16))
    resumed = Counts()
    trainer = quiet_trainer(max_epochs=2, num_sanity_val_steps=0)
    trainer.fit(resumed, loader(), loader(n=16), ckpt_path=path)
    torch.testing.assert_close(_weights(resumed), _weights(full))
    assert trainer.global_step == 16
    return resumed


def test_resume_from_the_last_batch_of_an_epoch_goes_on_with_the_next_epoch(tmp_path):
    resumed = _resume_matches_uninterrupted(tmp_path, "batch", batch_idx=7)
    assert resumed.epoch_starts == [1] and resumed.batches == 8


def test_resume_from_validation_at_the_epoch_end(tmp_path):
    resumed = _resume_matches_uninterrupted(tmp_path, "validation")
    assert resumed.epoch_starts == [1] and resumed.batches == 8


def test_resume_from_inside_an_epoch_skips_the_batches_already_trained(tmp_path):
    resumed = _resume_matches_uninterrupted(tmp_path, "batch", batch_idx=2)
    assert resumed.epoch_starts == [0, 1] and resumed.batches == 5 + 8
