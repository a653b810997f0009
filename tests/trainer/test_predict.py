"""``Trainer.predict``: predictions in order, several loaders, the model left as it was."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

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
