"""BasePredictionWriter: each prediction written with the dataset indices of its samples, per batch or at the end,
with return_predictions=False, with several loaders and on two real ranks."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader

from framework.callbacks import BasePredictionWriter
from framework.errors import MisconfigurationError
from tests.helpers import Regressor, quiet_trainer, regression_data


class Writer(BasePredictionWriter):
    def __init__(self, directory, write_interval):
        super().__init__(write_interval)
        self.directory = str(directory)

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        torch.save((prediction, batch_indices), os.path.join(self.directory,
                                                            f"r{trainer.global_rank}-l{dataloader_idx}-b{batch_idx}.pt"))

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        torch.save((predictions, batch_indices), os.path.join(self.directory, f"r{trainer.global_rank}-all.pt"))


def _check(model, dataset, prediction, indices):
    x = dataset.tensors[0][torch.tensor(indices)]
    torch.testing.assert_close(prediction, model(x).detach())


def test_each_batch_is_written_with_the_indices_of_its_samples_even_in_a_shuffled_order(tmp_path):
    dataset, model = regression_data(20), Regressor()
    shuffled = DataLoader(dataset, batch_size=6, shuffle=True)  # the indices, not the positions, name the samples
    trainer = quiet_trainer(callbacks=[Writer(tmp_path, "batch")])
    assert trainer.predict(model, shuffled, return_predictions=False) is None
    seen = []
    for batch_idx in range(4):
        prediction, indices = torch.load(tmp_path / f"r0-l0-b{batch_idx}.pt", weights_only=False)
        _check(model, dataset, prediction, indices)
        seen += indices
    assert sorted(seen) == list(range(20)) and seen != list(range(20))


def test_the_end_writer_gets_every_prediction_even_without_return_predictions_and_several_loaders(tmp_path):
    first, second, model = regression_data(10), regression_data(7, seed=1), Regressor()
    trainer = quiet_trainer(callbacks=[Writer(tmp_path, "epoch")])
    loaders = [DataLoader(first, batch_size=4), DataLoader(second, batch_size=4)]
    assert trainer.predict(model, loaders, return_predictions=False) is None
    predictions, indices = torch.load(tmp_path / "r0-all.pt", weights_only=False)
    assert [len(p) for p in predictions] == [3, 2] and indices == [[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]],
                                                                  [[0, 1, 2, 3], [4, 5, 6]]]
    for dataset, batches, batch_indices in zip((first, second), predictions, indices, strict=True):
        for prediction, sample_indices in zip(batches, batch_indices, strict=True):
            _check(model, dataset, prediction, sample_indices)
    assert not list(tmp_path.glob("r0-l*"))  # "epoch": nothing per batch


def test_on_two_ranks_each_writes_its_part_and_together_they_cover_the_data_once(tmp_path):
    dataset, model = regression_data(22), Regressor()
    trainer = quiet_trainer(devices=2, callbacks=[Writer(tmp_path, "batch_and_epoch")])
    trainer.predict(model, DataLoader(dataset, batch_size=4), return_predictions=False)
    covered = []
    for rank in (0, 1):
        predictions, indices = torch.load(tmp_path / f"r{rank}-all.pt", weights_only=False)
        for prediction, sample_indices in zip(predictions, indices[0], strict=True):
            _check(model, dataset, prediction, sample_indices)
            covered += sample_indices
        assert len(list(tmp_path.glob(f"r{rank}-l0-b*.pt"))) == len(predictions)
    assert sorted(covered) == list(range(22))


def test_a_bad_interval_and_a_missing_implementation_say_so(tmp_path):
    with pytest.raises(MisconfigurationError, match=r"write_interval='step'.*'batch', 'epoch', 'batch_and_epoch'"):
        BasePredictionWriter("step")
    with pytest.raises(NotImplementedError, match="implement write_on_batch_end"):
        quiet_trainer(callbacks=[BasePredictionWriter()]).predict(Regressor(), DataLoader(regression_data(4)))
