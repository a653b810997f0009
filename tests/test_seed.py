from __future__ import annotations

import logging
import random

import numpy
import pytest
import torch

import framework


def test_seed_everything_makes_python_numpy_and_torch_repeat():
    def draw():
        return random.random(), numpy.random.rand(), torch.rand(1).item()

    assert framework.seed_everything(7) == 7
    first = draw()
    framework.seed_everything(7)
    assert draw() == first


@pytest.mark.parametrize("seed", [-1, 2**32, "7", 1.5])
def test_bad_seeds_are_refused(seed):
    with pytest.raises(ValueError, match="seed"):
        framework.seed_everything(seed)


def test_workers_flag_gives_dataloader_workers_a_seed_function():
    from torch.utils.data import DataLoader

    from framework.seed import seed_worker
    from tests.helpers import Regressor, quiet_trainer, regression_data

    data = DataLoader(regression_data(16), batch_size=8, num_workers=1)
    try:
        framework.seed_everything(3, workers=True)
        quiet_trainer(max_epochs=1).fit(Regressor(), data)
    finally:
        framework.seed_everything(0, workers=False)
    assert data.worker_init_fn is seed_worker
    torch.manual_seed(11)
    seed_worker(0)
    assert numpy.random.get_state()[1][0] == 11


def test_isolated_rng_leaves_every_generator_where_it_was():
    from framework.seed import isolated_rng

    framework.seed_everything(5)
    expected = (random.random(), numpy.random.rand(), torch.rand(1).item())
    framework.seed_everything(5)
    with isolated_rng():
        random.random(), numpy.random.rand(), torch.rand(5)
    assert (random.random(), numpy.random.rand(), torch.rand(1).item()) == expected


def test_the_sanity_check_does_not_change_a_seeded_run():
    from tests.helpers import Regressor, loader, quiet_trainer

    def train(sanity_steps):
        framework.seed_everything(1)
        model = Regressor()
        quiet_trainer(max_epochs=1, num_sanity_val_steps=sanity_steps).fit(
            model, loader(shuffle=True), loader(n=16, shuffle=True))
        return model.net.weight.detach().clone()

    torch.testing.assert_close(train(2), train(0))


def test_verbose_logs_the_seed_and_can_be_silenced(caplog):
    with caplog.at_level(logging.INFO, logger="framework"):
        framework.seed_everything(7)
        framework.seed_everything(8, verbose=False)
    assert [record.getMessage() for record in caplog.records] == ["Seed set to 7"]
