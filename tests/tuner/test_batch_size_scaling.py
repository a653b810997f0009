"""Tuner.scale_batch_size: the largest batch that fits, found against a model that runs out of memory above a
known size (torch.OutOfMemoryError, as a device raises it)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

import framework
from framework.errors import MisconfigurationError
from framework.tuner import Tuner
from tests.helpers import Regressor, loader, quiet_trainer, regression_data


class Fits(Regressor):
    """Runs out of memory with batches above ``limit``; its loader reads ``self.batch_size``."""

    def __init__(self, limit: int = 40, rows: int = 256, batch_size: int = 8):
        super().__init__()
        self.limit, self.rows, self.batch_size = limit, rows, batch_size
        self.tried: list[int] = []

    def train_dataloader(self):
        return DataLoader(regression_data(self.rows), batch_size=self.batch_size)

    def training_step(self, batch, batch_idx):
        if batch_idx == 0:
            self.tried.append(len(batch[0]))
        if len(batch[0]) > self.limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return super().training_step(batch, batch_idx)


def test_power_mode_doubles_until_out_of_memory_and_keeps_the_last_size_that_fit():
    model, trainer = Fits(), quiet_trainer(max_epochs=1)
    before = {name: value.clone() for name, value in model.state_dict().items()}
    assert Tuner(trainer).scale_batch_size(model) == 32
    assert model.tried == [2, 4, 8, 16, 32, 64] and model.batch_size == 32
    assert all(torch.equal(value, before[name]) for name, value in model.state_dict().items())
    assert trainer.global_step == 0  # the user's Trainer did not run
    trainer.fit(model)
    assert trainer.num_training_batches == 8  # 256 rows in batches of 32


def test_binsearch_narrows_down_between_the_last_fit_and_the_first_failure():
    model = Fits(limit=40)
    assert Tuner(quiet_trainer()).scale_batch_size(model, mode="binsearch") == 40
    assert model.tried[:6] == [2, 4, 8, 16, 32, 64] and model.tried[6:] == [48, 40, 44, 42, 41]


def test_the_dataset_size_bounds_the_batch_and_a_hyperparameter_or_datamodule_can_hold_it():
    small = Fits(limit=10_000, rows=20)
    assert Tuner(quiet_trainer()).scale_batch_size(small, max_trials=10) == 20

    class FromHparams(Fits):
        def __init__(self, batch_size: int = 8):
            super().__init__(limit=16)
            del self.batch_size
            self.save_hyperparameters("batch_size")

        def train_dataloader(self):
            return DataLoader(regression_data(self.rows), batch_size=self.hparams.batch_size)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    model = FromHparams()
    assert Tuner(quiet_trainer()).scale_batch_size(model, init_val=4) == 16 and model.hparams.batch_size == 16

    class Data(framework.DataModule):
        def __init__(self):
            super().__init__()
            self.batch_size = 2

        def train_dataloader(self):
            return DataLoader(regression_data(64), batch_size=self.batch_size)

    data = Data()
    assert Tuner(quiet_trainer()).scale_batch_size(Regressor(), datamodule=data, max_trials=3) == 8
    assert data.batch_size == 8


def test_what_cannot_work_is_refused():
    with pytest.raises(MisconfigurationError, match="cannot be used with dataloaders passed directly"):
        Tuner(quiet_trainer()).scale_batch_size(Fits(), train_dataloaders=loader())
    with pytest.raises(MisconfigurationError, match="Field batch_size not found in `model`, `datamodule`"):
        Tuner(quiet_trainer()).scale_batch_size(Regressor())
    with pytest.raises(MisconfigurationError, match="even batch_size=2 ran out of memory"):
        Tuner(quiet_trainer()).scale_batch_size(Fits(limit=1))
    with pytest.raises(MisconfigurationError, match=r"mode='linear'"):
        Tuner(quiet_trainer()).scale_batch_size(Fits(), mode="linear")


class FitsOnRankOne(Fits):
    def training_step(self, batch, batch_idx):
        if self.global_rank == 1:  # only rank 0 runs out of memory: the other must not wait for it
            return Regressor.training_step(self, batch, batch_idx)
        return super().training_step(batch, batch_idx)


def test_on_two_ranks_an_out_of_memory_on_one_rank_ends_the_trial_on_both():
    model, trainer = FitsOnRankOne(limit=40), quiet_trainer(devices=2, max_epochs=1)
    before = {name: value.clone() for name, value in model.state_dict().items()}
    assert Tuner(trainer).scale_batch_size(model, mode="binsearch") == 40 and model.batch_size == 40
    assert all(torch.equal(value, before[name]) for name, value in model.state_dict().items())
    assert trainer.global_step == 0


def test_after_the_search_the_model_is_attached_to_the_users_trainer_and_its_logger():
    from framework.loggers import CSVLogger

    model, trainer = Fits(), quiet_trainer(max_epochs=1, logger=CSVLogger("logs"))
    Tuner(trainer).scale_batch_size(model, max_trials=2)
    assert model.trainer is trainer and model.logger is trainer.logger is not None  # as after Lightning's
