"""``ResumableSampler``: a sample order the framework owns, so a resumed run sees exactly the data it would have.

A DataLoader with ``shuffle=True`` draws a fresh order from the global random generator at
every epoch, which a checkpoint cannot replay. Training loaders are rebuilt around this
sampler instead: the order of an epoch is a function of ``(seed, epoch)``
(``runtime.epoch_order``, as ``DistributedSampler`` does it), the seed is saved in checkpoints, and a run resumed inside
an epoch starts the sampler past the samples already trained on, without loading them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    Sampler,
    SequentialSampler,
)

from framework.runtime.data_split import ShardedSampler, rebuilt
from framework.runtime.epoch_order import epoch_order, plainly_shuffles, strided_part

# The loader's worker seeds come from a second generator, on a stream apart from the order's.
_WORKER_STREAM = 2**40


class ResumableSampler(Sampler[int]):
    """Indices ``0 .. length-1``, shuffled by ``(seed, epoch)`` when ``shuffle``; ``skip(n)`` starts the next
    pass ``n`` samples in.

    ``worker_generator`` is given to the DataLoader, so the seeds of its workers (which a
    plain DataLoader draws from the global generator) follow ``(seed, epoch)`` too. A pass
    still draws from the global generator what the replaced loader would have
    (``global_draws``), so the random state of training matches a plain loop's.

    Example::

        sampler = ResumableSampler(len(dataset), shuffle=True, seed=7)
        sampler.set_epoch(3)
        sampler.skip(64)            # resume after 64 samples of epoch 3
    """

    def __init__(self, length: int, shuffle: bool, seed: int, num_replicas: int = 1, rank: int = 0,
                 global_draws: int = 0, first_pass_draws: int | None = None) -> None:
        self.length = length
        # What the loader this sampler replaces drew from the global generator at each pass (its worker seed, its
        # shuffle), drawn the same way, so the random state the first step sees is a plain loop's; the first pass
        # draws fewer where drawing the run's seed took their place.
        self.global_draws = global_draws
        self._next_pass_draws = global_draws if first_pass_draws is None else first_pass_draws
        self.shuffle = shuffle
        self.seed = seed
        # Several ranks: each takes every num_replicas-th sample of the epoch's order, padded by its first
        # samples so all ranks run the same number of batches (as DistributedSampler does).
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self._skip = 0
        self.worker_generator = torch.Generator()
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order the next pass yields."""
        self.epoch = epoch
        self.worker_generator.manual_seed(self.seed + epoch + _WORKER_STREAM)

    def skip(self, count: int) -> None:
        """Start the next pass ``count`` samples in (a resumed epoch); later passes start at 0."""
        self._skip = count

    def __iter__(self) -> Iterator[int]:
        start, self._skip = self._skip, 0
        if start == 0:  # a resumed epoch's random state comes from the checkpoint, past these draws
            for _ in range(self._next_pass_draws):
                torch.empty((), dtype=torch.int64).random_()
        self._next_pass_draws = self.global_draws
        order = epoch_order(self.length, self.shuffle, self.seed, self.epoch)
        if self.num_replicas > 1:
            order = strided_part(order, self.num_replicas, self.rank)
        return iter(order[start:])

    def __len__(self) -> int:
        return -(-self.length // self.num_replicas)


def with_resumable_sampler(loader: Any, run_seed: Callable[[], tuple[int, bool]], num_replicas: int = 1,
                           rank: int = 0) -> Any:
    """``loader`` rebuilt around a ``ResumableSampler`` when it is a DataLoader that plainly shuffles (or not)
    map-style data in batches; with several ranks, other samplers are sharded (``ShardedSampler``);
    any other loader as it is (its order is its own).

    ``run_seed`` (the seed, and whether it was drawn from the global generator now) is asked
    only when the loader shuffles by the global generator. The rebuilt loader draws from the
    global generator what the given one would have at each pass (a DataLoader its workers' base
    seed, a RandomSampler its order's seed), so dropout in the first step sees what it would
    in a plain loop.
    """
    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return loader
    if type(loader.batch_sampler) is not BatchSampler:  # a custom batch sampler, or batch_size=None
        if num_replicas > 1 and loader.batch_sampler is not None:
            warnings.warn(
                f"The training DataLoader has a custom batch_sampler ({type(loader.batch_sampler).__name__}), which "
                f"the framework cannot shard: each of the {num_replicas} ranks trains on all of its batches. "
                "Shard it by trainer.global_rank / trainer.world_size, and pass use_distributed_sampler=False.",
                stacklevel=2,
            )
        return loader
    sampler = loader.sampler
    if num_replicas > 1 and isinstance(sampler, DistributedSampler):
        return loader  # sharded by the user already
    plainly_shuffled = plainly_shuffles(sampler)
    if not plainly_shuffled and type(sampler) is not SequentialSampler:
        if num_replicas == 1:
            return loader
        return rebuilt(loader, ShardedSampler(sampler, num_replicas, rank, contiguous=False))
    drawn = False
    if not plainly_shuffled:
        seed = 0  # an unshuffled order needs none
    elif sampler.generator is not None:
        # the user seeded the order with a generator of their own: derive the seed from it, so it still decides
        seed = int(torch.randint(0, 2**62, (), generator=sampler.generator))
    else:
        seed, drawn = run_seed()
    # A plain loader draws its workers' base seed, and a RandomSampler (one rank) its order's seed, from the
    # global generator unless given generators of their own.
    draws = int(loader.generator is None) + int(plainly_shuffled and sampler.generator is None and num_replicas == 1)
    resumable = ResumableSampler(len(loader.dataset), shuffle=plainly_shuffled, seed=seed, num_replicas=num_replicas,
                                 rank=rank, global_draws=draws, first_pass_draws=max(draws - drawn, 0))
    return rebuilt(loader, resumable, resumable.worker_generator)


def with_eval_shard(loader: Any, num_replicas: int, rank: int) -> Any:
    """``loader`` rebuilt to yield only this rank's contiguous part of its samples (evaluation and prediction).

    Loaders it cannot rebuild (iterables, custom batch samplers, a DistributedSampler the user
    chose) are returned as they are.
    """
    if num_replicas < 2 or not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return loader
    if type(loader.batch_sampler) is not BatchSampler or isinstance(loader.sampler, DistributedSampler):
        return loader
    return rebuilt(loader, ShardedSampler(loader.sampler, num_replicas, rank, contiguous=True))


def skip_in_sampler(loader: Any, batches: int) -> bool:
    """Make ``loader``'s next pass start ``batches`` batches in, if its sampler can; whether it could."""
    sampler = getattr(loader, "sampler", None)
    if not isinstance(sampler, ResumableSampler):
        return False
    sampler.skip(batches * loader.batch_size)
    return True
