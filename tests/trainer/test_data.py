"""Finding loaders, when they are asked for, and what is done to them (framework/trainer/data.py)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

import framework
from framework.errors import MisconfigurationError
from framework.utilities.warnings import PossibleUserWarning
from tests.helpers import Regressor, loader, quiet_trainer, regression_data


class CountsLoads(Regressor):
    """Its loaders record (stage, current_epoch, global_step) whenever they are asked for."""

    def __init__(self):
        super().__init__()
        self.loads: list[tuple[str, int, int]] = []

    def train_dataloader(self):
        self.loads.append(("train", self.current_epoch, self.global_step))
        return loader(n=24)

    def val_dataloader(self):
        self.loads.append(("val", self.current_epoch, self.global_step))
        return loader(n=16)


def test_validation_loaders_are_reloaded_only_when_validation_runs():
    model = CountsLoads()
    trainer = quiet_trainer(max_epochs=4, reload_dataloaders_every_n_epochs=1, check_val_every_n_epoch=2,
                            num_sanity_val_steps=0)
    trainer.fit(model)
    assert [load for load in model.loads if load[0] == "val"] == [("val", 1, 6), ("val", 3, 12)]
    assert [load for load in model.loads if load[0] == "train"] == [("train", e, 3 * e) for e in range(4)]


def test_a_zero_validation_limit_never_asks_for_the_validation_loader():
    model = CountsLoads()
    quiet_trainer(max_epochs=2, limit_val_batches=0).fit(model)
    assert [stage for stage, _, _ in model.loads] == ["train"]


def test_a_dict_of_loaders_runs_them_in_order():
    class Two(Regressor):
        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val_loss", self.loss(batch))

    results = quiet_trainer().validate(Two(), {"small": loader(n=8), "large": loader(n=16, seed=1)}, verbose=False)
    assert [list(r) for r in results] == [["val_loss/dataloader_idx_0"], ["val_loss/dataloader_idx_1"]]


def test_a_dataset_passed_as_a_loader_gets_a_hint():
    with pytest.raises(MisconfigurationError, match=r"gave a Dataset \(TensorDataset\); wrap it in a DataLoader"):
        quiet_trainer(max_epochs=1).fit(Regressor(), regression_data())


def test_the_sampler_hears_each_epoch_once():
    epochs = []

    class Sampler(RandomSampler):
        def set_epoch(self, epoch):
            epochs.append(epoch)

    data = regression_data()
    train = DataLoader(data, batch_size=8, sampler=Sampler(data, generator=torch.Generator().manual_seed(0)))
    quiet_trainer(max_epochs=3).fit(Regressor(), train)
    assert epochs == [0, 1, 2]


def test_without_a_sanity_check_the_validation_loader_is_asked_for_before_training_when_epoch_one_validates():
    model = CountsLoads()
    quiet_trainer(max_epochs=2, num_sanity_val_steps=0).fit(model)
    assert model.loads == [("train", 0, 0), ("val", 0, 0)]  # as in Lightning, ready for a progress bar
    model = CountsLoads()
    quiet_trainer(max_epochs=2, num_sanity_val_steps=0, check_val_every_n_epoch=2).fit(model)
    assert model.loads == [("train", 0, 0), ("val", 1, 6)]


def test_a_zero_evaluation_limit_skips_the_loop():
    calls = []

    class Watches(Regressor):
        def on_test_start(self):
            calls.append("on_test_start")

    assert quiet_trainer(limit_test_batches=0).test(Watches(), loader(), verbose=False) == []
    assert calls == []
    model = CountsLoads()  # as in Lightning: the loop's loaders are not even asked for
    assert quiet_trainer(limit_val_batches=0).validate(model, verbose=False) == [] and model.loads == []


def test_nothing_to_train_asks_for_no_training_loader_and_calls_no_training_hooks():
    class Watches(CountsLoads):
        def on_train_start(self):
            self.loads.append(("on_train_start", self.current_epoch, self.global_step))

    model = Watches()
    quiet_trainer(max_epochs=2, limit_train_batches=0).fit(model)
    assert model.loads == [("val", 0, 0)]  # the sanity check only
    model, trainer = Watches(), quiet_trainer(max_epochs=1, num_sanity_val_steps=0)
    trainer.fit(model)
    model.loads.clear()
    trainer.fit(model)  # max_epochs reached already
    assert model.loads == [] and trainer.global_step == 3


def test_a_zero_predict_limit_skips_the_loop():
    calls = []

    class Watches(Regressor):
        def on_predict_start(self):
            calls.append("on_predict_start")

    assert quiet_trainer(limit_predict_batches=0).predict(Watches(), loader()) == []
    assert calls == []

    class CountsPredictLoads(Regressor):
        loads = 0

        def predict_dataloader(self):
            CountsPredictLoads.loads += 1
            return loader()

    assert quiet_trainer(limit_predict_batches=0).predict(CountsPredictLoads()) == []
    assert CountsPredictLoads.loads == 0


def test_lightnings_warnings_about_the_training_data(tmp_path):
    logger = framework.loggers.CSVLogger(tmp_path)
    expected = r"number of training batches \(8\) is smaller than the logging interval Trainer\(log_every_n_steps=50\)"
    with pytest.warns(PossibleUserWarning, match=expected):
        quiet_trainer(max_epochs=1, logger=logger).fit(Regressor(), loader())
    with pytest.warns(UserWarning, match="overfit but enabled train dataloader shuffling. We are turning off"):
        quiet_trainer(max_epochs=1, overfit_batches=2).fit(Regressor(), loader(shuffle=True))
    overfit = quiet_trainer(max_epochs=1, overfit_batches=2)  # both loaders read in order, each warned about
    with pytest.warns(UserWarning) as warned:
        overfit.fit(Regressor(), loader(shuffle=True), loader(shuffle=True))
    assert sum("enabled train dataloader shuffling" in str(w.message) for w in warned) == 1
    assert sum("enabled val dataloader shuffling" in str(w.message) for w in warned) == 1
    assert isinstance(overfit.train_dataloader.sampler, SequentialSampler)
    assert isinstance(overfit.val_dataloaders.sampler, SequentialSampler)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*logging interval")
        quiet_trainer(max_epochs=1, logger=logger, log_every_n_steps=4).fit(Regressor(), loader())
