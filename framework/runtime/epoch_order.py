"""The order of a pass over map-style data that the framework owns: a function of ``(seed, epoch)``, so a resumed
run replays it exactly, where a shuffling DataLoader draws each epoch's order from the global generator.

The Runtime's, the Trainer's and the Accelerator's loaders build on it (``data_split.ShardedSampler``,
``trainer.sampler.ResumableSampler``, ``accelerate.data.RankBatches``); how the ranks deal an order out stays
each one's own.

Example::

    if plainly_shuffles(loader.sampler):
        order = epoch_order(len(loader.dataset), shuffle=True, seed=7, epoch=3)   # the same list on every rank
        mine = strided_part(order, num_replicas=4, rank=1)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import RandomSampler


def plainly_shuffles(sampler: Any) -> bool:
    """Whether ``sampler`` is what ``DataLoader(shuffle=True)`` makes: a ``RandomSampler`` over the whole dataset,
    without replacement, whose order an ``epoch_order`` can take over (not a subset, weights or replacement)."""
    return (type(sampler) is RandomSampler and not sampler.replacement
            and sampler.num_samples == len(sampler.data_source))


def epoch_order(length: int, shuffle: bool, seed: int, epoch: int) -> Sequence[int]:
    """The indices ``0 .. length-1``, shuffled by ``(seed, epoch)`` when ``shuffle`` (as ``DistributedSampler``
    seeds its shuffle), else in order."""
    if not shuffle:
        return range(length)
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return torch.randperm(length, generator=generator).tolist()


def strided_part(order: Sequence[int], num_replicas: int, rank: int, pad: bool = True) -> list[int]:
    """Every ``num_replicas``-th index of ``order`` from ``rank`` on; with ``pad``, ``order`` first padded by its
    own first indices so every rank gets as many (as ``DistributedSampler`` pads)."""
    order = list(order)
    if order and pad:
        padding = -len(order) % num_replicas
        order += (order * (padding // len(order) + 1))[:padding]
    return order[rank::num_replicas]
