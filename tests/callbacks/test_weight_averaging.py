"""Weight averaging: the EMA against one computed by hand, validation and checkpoints on the average, and a
resumed run going on with it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from framework.callbacks import EMAWeightAveraging, WeightAveraging
from framework.errors import MisconfigurationError
from tests.helpers import Regressor, loader, quiet_trainer


def _flat(module: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in module.parameters()])


def _plain_ema(decay: float, epochs: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The weights' EMA after every step of a plain loop (the first step's weights start it), and its value at
    each epoch's end."""
    torch.manual_seed(0)
    net = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    average, at_epoch_end = None, []
    for _ in range(epochs):
        for x, y in loader():
            nn.functional.mse_loss(net(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            weights = _flat(net)
            average = weights.clone() if average is None else decay * average + (1 - decay) * weights
        at_epoch_end.append(average.clone())
    return average, at_epoch_end


class SeesValidationWeights(Regressor):
    def __init__(self):
        super().__init__()
        self.validated_with: list[torch.Tensor] = []

    def validation_step(self, batch, batch_idx):
        if batch_idx == 0 and not self.trainer.sanity_checking:
            self.validated_with.append(_flat(self))
        return super().validation_step(batch, batch_idx)


def test_the_ema_is_validated_and_is_what_fit_ends_with():
    model = SeesValidationWeights()
    trainer = quiet_trainer(max_epochs=2, callbacks=[EMAWeightAveraging(decay=0.9)])
    trainer.fit(model, loader(), loader(n=16))
    final, at_epoch_end = _plain_ema(0.9, 2)
    torch.testing.assert_close(_flat(model), final)
    assert len(model.validated_with) == 2
    for seen, expected in zip(model.validated_with, at_epoch_end, strict=True):
        torch.testing.assert_close(seen, expected)


def test_checkpoints_hold_the_average_and_a_resumed_run_goes_on_with_it(tmp_path):
    trainer = quiet_trainer(max_epochs=1, callbacks=[EMAWeightAveraging(decay=0.9)])
    trainer.fit(Regressor(), loader())
    trainer.save_checkpoint(tmp_path / "one.ckpt")
    saved = torch.load(tmp_path / "one.ckpt", weights_only=True)
    _, at_epoch_end = _plain_ema(0.9, 1)
    weights = saved["state_dict"]
    torch.testing.assert_close(torch.cat([weights["net.weight"].flatten(), weights["net.bias"]]), at_epoch_end[0])
    assert set(saved["current_model_state"]) == set(saved["state_dict"])

    resumed = Regressor()
    quiet_trainer(max_epochs=2, callbacks=[EMAWeightAveraging(decay=0.9)]).fit(resumed, loader(),
                                                                              ckpt_path=tmp_path / "one.ckpt")
    torch.testing.assert_close(_flat(resumed), _plain_ema(0.9, 2)[0])  # as if never stopped


def test_when_to_update_and_what_is_refused():
    ema = EMAWeightAveraging(update_every_n_steps=2, update_starting_at_step=4)
    assert [step for step in range(10) if ema.should_update(step_idx=step)] == [4, 6, 8]
    assert EMAWeightAveraging(update_starting_at_epoch=1).should_update(epoch_idx=1)
    assert not WeightAveraging().should_update(epoch_idx=3) and WeightAveraging().should_update(step_idx=0)
    with pytest.raises(MisconfigurationError, match="decay=1.5"):
        EMAWeightAveraging(decay=1.5)
