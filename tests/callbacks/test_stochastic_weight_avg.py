"""StochasticWeightAveraging against PyTorch's own swa_utils recipe written as a plain loop, with batch norm,
and across a resume inside the SWA phase."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

from framework.callbacks import StochasticWeightAveraging
from framework.errors import MisconfigurationError
from tests.helpers import Regressor, loader, quiet_trainer


class WithBatchNorm(Regressor):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)]


def _plain_swa(epochs: int, swa_start: int) -> dict[str, torch.Tensor]:
    model = WithBatchNorm()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    average, swa_scheduler = AveragedModel(model, use_buffers=False), None
    for epoch in range(epochs):
        if epoch == swa_start:
            swa_scheduler = SWALR(optimizer, swa_lr=0.02, anneal_epochs=2, anneal_strategy="cos")
        for x, y in loader():
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
        if swa_scheduler is not None:
            average.update_parameters(model)
            swa_scheduler.step()
        else:
            scheduler.step()
    update_bn(loader(), average)
    return {name: value.detach().clone() for name, value in average.module.state_dict().items()}


def _swa() -> StochasticWeightAveraging:
    return StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=2, annealing_epochs=2)


def test_swa_ends_with_the_average_of_the_recipe_batch_norm_statistics_included():
    model = WithBatchNorm()
    quiet_trainer(max_epochs=5, callbacks=[_swa()]).fit(model, loader())
    for name, value in _plain_swa(5, 2).items():
        torch.testing.assert_close(model.state_dict()[name], value, msg=name)


def test_a_run_resumed_inside_the_swa_phase_ends_as_one_uninterrupted(tmp_path):
    first = quiet_trainer(max_epochs=4, callbacks=[_swa()])
    model = WithBatchNorm()
    first.fit(model, loader())
    first.save_checkpoint(tmp_path / "four.ckpt")  # after fit: the average of two epochs is in the model
    for name, value in _plain_swa(4, 2).items():
        torch.testing.assert_close(model.state_dict()[name], value, msg=name)
    resumed = WithBatchNorm()
    quiet_trainer(max_epochs=5, callbacks=[_swa()]).fit(resumed, loader(), ckpt_path=tmp_path / "four.ckpt")
    for name, value in _plain_swa(5, 2).items():
        torch.testing.assert_close(resumed.state_dict()[name], value, msg=name)


def test_bad_arguments_are_refused():
    with pytest.raises(MisconfigurationError, match="swa_epoch_start=0"):
        StochasticWeightAveraging(swa_lrs=0.1, swa_epoch_start=0)
    with pytest.raises(MisconfigurationError, match="swa_lrs=-1.0"):
        StochasticWeightAveraging(swa_lrs=-1.0)
    with pytest.raises(MisconfigurationError, match="needs max_epochs"):
        quiet_trainer(max_steps=5, callbacks=[StochasticWeightAveraging(swa_lrs=0.1)]).fit(Regressor(), loader())
