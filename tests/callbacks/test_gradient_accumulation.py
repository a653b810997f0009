"""GradientAccumulationScheduler: the schedule against a plain PyTorch loop, and its refusals."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from framework.callbacks import GradientAccumulationScheduler
from framework.errors import MisconfigurationError
from tests.helpers import Regressor, loader, quiet_trainer


def _plain_weights(schedule: dict[int, int], epochs: int) -> torch.Tensor:
    torch.manual_seed(0)
    net = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    batches = list(loader())
    for epoch in range(epochs):
        every = max([1] + [factor for start, factor in schedule.items() if start <= epoch][-1:])
        for index, (x, y) in enumerate(batches):
            (nn.functional.mse_loss(net(x), y) / every).backward()
            if (index + 1) % every == 0 or index == len(batches) - 1:
                optimizer.step()
                optimizer.zero_grad()
    return torch.cat([net.weight.detach().flatten(), net.bias.detach()])


def test_the_schedule_trains_as_a_plain_loop_accumulating_the_same_way():
    schedule = {1: 2, 2: 3}  # epoch 0: every batch; epoch 1: pairs; epoch 2 on: threes (8 batches: 3, 3, 2)
    model = Regressor()
    trainer = quiet_trainer(max_epochs=3, callbacks=[GradientAccumulationScheduler(scheduling=schedule)])
    trainer.fit(model, loader())
    assert trainer.global_step == 8 + 4 + 3
    weights = torch.cat([model.net.weight.detach().flatten(), model.net.bias.detach()])
    torch.testing.assert_close(weights, _plain_weights(schedule, 3))


def test_the_factor_of_each_epoch():
    scheduler = GradientAccumulationScheduler(scheduling={4: 4, 8: 8})
    assert [scheduler.get_accumulate_grad_batches(epoch) for epoch in (0, 3, 4, 7, 8, 100)] == [1, 1, 4, 4, 8, 8]
    assert scheduler.going_to_accumulate_grad_batches()
    assert not GradientAccumulationScheduler(scheduling={0: 1}).going_to_accumulate_grad_batches()


@pytest.mark.parametrize(("scheduling", "message"), [
    ({}, r"scheduling=\{\}"),
    ({-1: 2}, "epoch key -1"),
    ({1: 0}, "for epoch 1, 0"),
    ({"1": 2}, "epoch key '1'"),
])
def test_bad_schedules_are_refused(scheduling, message):
    with pytest.raises(MisconfigurationError, match=message):
        GradientAccumulationScheduler(scheduling=scheduling)


def test_manual_optimization_and_the_trainers_own_setting_are_refused():
    class Manual(Regressor):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

    scheduler = GradientAccumulationScheduler(scheduling={1: 2})
    with pytest.raises(MisconfigurationError, match="needs automatic optimization"):
        quiet_trainer(max_epochs=1, callbacks=[scheduler]).fit(Manual(), loader())
    with pytest.raises(MisconfigurationError, match=r"accumulate_grad_batches=4\) was given together with"):
        quiet_trainer(max_epochs=1, accumulate_grad_batches=4, callbacks=[scheduler]).fit(Regressor(), loader())
    trainer, model = quiet_trainer(max_epochs=2, callbacks=[scheduler]), Regressor()
    trainer.fit(model, loader())
    assert trainer.accumulate_grad_batches == 2  # the schedule's own setting ...
    scheduler.on_train_start(trainer, model)  # ... is no contradiction when the same Trainer fits again
