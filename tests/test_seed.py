from __future__ import annotations

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
