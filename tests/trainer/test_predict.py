"""``Trainer.predict``: predictions in order, several loaders, the model left as it was."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

import framework
from framework.errors import MisconfigurationError
from tests.helpers import Regressor, loader, quiet_trainer, regression_data


def test_predictions_come_back_in_order_and_equal_the_model_output():
    model = Regressor()
    predictions = quiet_trainer().predict(model, loader(n=40, batch_size=8))
    assert len(predictions) == 5
    x = regression_data(40).tensors[0]
    with torch.no_grad():
        torch.testing.assert_close(torch.cat(predictions), model(x))


def test_several_loaders_give_a_list_per_loader_and_dataloader_idx():
    seen = []

    class Indexed(Regressor):
        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            seen.append(dataloader_idx)
            return super().predict_step(batch, batch_idx)

    predictions = quiet_trainer().predict(Indexed(), [loader(n=16), loader(n=24)])
    assert [len(p) for p in predictions] == [2, 3]
    assert seen == [0, 0, 1, 1, 1]


def test_predict_runs_without_gradients_and_restores_train_mode():
    grads = []

    class Checks(Regressor):
        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            grads.append((torch.is_grad_enabled(), self.training))
            return super().predict_step(batch, batch_idx)

    model = Checks()
    model.train()
    quiet_trainer(limit_predict_batches=2).predict(model, DataLoader(regression_data(32).tensors[0], batch_size=8))
    assert grads == [(False, False), (False, False)]
    assert model.training


def test_return_predictions_false_returns_none():
    assert quiet_trainer().predict(Regressor(), loader(), return_predictions=False) is None


def test_with_return_predictions_false_nothing_is_kept():
    trainer = quiet_trainer()
    assert trainer.predict(Regressor(), loader(), return_predictions=False) is None
    assert not hasattr(trainer, "predictions")


def test_predict_without_predict_step_or_forward_says_to_define_one():
    class NoForward(framework.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

    with pytest.raises(MisconfigurationError, match=r"NoForward.predict_step or .forward, and it has neither"):
        quiet_trainer().predict(NoForward(), DataLoader(torch.randn(4, 2), batch_size=2))
