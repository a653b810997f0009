"""Splitting a sampler's order, or a DataLoader, over the ranks (the Runtime's ``setup_dataloaders``, the Trainer's
evaluation loaders), and rebuilding a DataLoader around another sampler."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import (
    DataLoader,
    DistributedSampler,
    IterableDataset,
    Sampler,
    SequentialSampler,
)

from framework.errors import MisconfigurationError
from framework.runtime.epoch_order import plainly_shuffles, strided_part


class ShardedSampler(Sampler[int]):
    """This rank's part of another sampler's order, re-read every epoch.

    ``contiguous=False``: every ``num_replicas``-th index, padded by the first ones so all ranks
    get as many (training: the ranks' batches together are the one-process batches of the
    same order), or with ``pad=False`` unpadded (each sample on one rank). ``contiguous=True``
    (the Trainer's evaluation): a contiguous slice, unpadded, so each sample is seen once and
    the ranks' parts, joined in rank order, are the whole order (predictions come back in order).

    Example::

        ShardedSampler(SequentialSampler(range(10)), num_replicas=4, rank=1, contiguous=True)  # 3, 4, 5
    """

    def __init__(self, sampler: Sampler, num_replicas: int, rank: int, contiguous: bool, pad: bool = True) -> None:
        self.sampler = sampler
        self.num_replicas = num_replicas
        self.rank = rank
        self.contiguous = contiguous
        self.pad = pad and not contiguous

    def __iter__(self) -> Iterator[int]:
        if self.contiguous and isinstance(self.sampler, SequentialSampler):
            return iter(range(*contiguous_part(len(self.sampler), self.num_replicas, self.rank)))
        order = list(self.sampler)
        if self.contiguous:
            start, end = contiguous_part(len(order), self.num_replicas, self.rank)
            return iter(order[start:end])
        return iter(strided_part(order, self.num_replicas, self.rank, self.pad))

    def __len__(self) -> int:
        total = len(self.sampler)  # type: ignore[arg-type]
        if self.contiguous:
            start, end = contiguous_part(total, self.num_replicas, self.rank)
            return end - start
        if not self.pad:
            return len(range(self.rank, total, self.num_replicas))
        return -(-total // self.num_replicas)

    def set_epoch(self, epoch: int) -> None:
        """Pass the epoch on to the wrapped sampler, if it shuffles by epoch."""
        if callable(getattr(self.sampler, "set_epoch", None)):
            self.sampler.set_epoch(epoch)


def contiguous_part(length: int, num_replicas: int, rank: int) -> tuple[int, int]:
    """``(start, end)`` of rank ``rank``'s slice of ``length`` items split in ``num_replicas`` near-equal parts."""
    base, extra = divmod(length, num_replicas)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def shard_loader(loader: Any, num_replicas: int, rank: int, shuffle_seed: Callable[[], int],
                 even_batches: bool = True) -> Any:
    """``loader`` rebuilt to yield rank ``rank``'s part (``Runtime.setup_dataloaders``).

    A ``DistributedSampler`` (a shuffling loader's seeded by ``shuffle_seed()``), padded so every
    rank runs as many batches; with ``even_batches=False`` an unshuffled loader is dealt out in
    turn without repeats instead. Another sampler (a subset, weights, replacement) keeps its
    order, dealt out in turn. Iterable datasets and loaders already holding a DistributedSampler
    are returned as they are.
    """
    if (not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset)
            or isinstance(loader.sampler, DistributedSampler)):
        return loader
    if type(loader.batch_sampler).__name__ != "BatchSampler":
        raise MisconfigurationError(
            "setup_dataloaders cannot shard a DataLoader with a custom batch_sampler. Shard it yourself "
            "(runtime.world_size, runtime.global_rank) and pass use_distributed_sampler=False."
        )
    sampler = loader.sampler
    shuffle = plainly_shuffles(sampler)
    if shuffle or (type(sampler) is SequentialSampler and even_batches):
        return rebuilt(loader, DistributedSampler(loader.dataset, num_replicas=num_replicas, rank=rank,
                                                  shuffle=shuffle, seed=shuffle_seed() if shuffle else 0))
    # unpadded, or the user's own order (a subset, weights, replacement): that order, dealt out in turn
    return rebuilt(loader, ShardedSampler(sampler, num_replicas, rank, contiguous=False, pad=even_batches))


def rebuilt(loader: DataLoader, sampler: Sampler, generator: torch.Generator | None = None) -> DataLoader:
    """A DataLoader like ``loader`` in every setting, but drawing indices from ``sampler``."""
    settings = _settings(loader, generator)
    return DataLoader(loader.dataset, sampler=sampler, batch_size=loader.batch_size, drop_last=loader.drop_last,
                      **settings)


def rebuilt_with_batch_sampler(loader: DataLoader, batch_sampler: Sampler) -> DataLoader:
    """A DataLoader like ``loader`` in every setting, but drawing its batches' indices from ``batch_sampler``."""
    return DataLoader(loader.dataset, batch_sampler=batch_sampler, **_settings(loader, None))


def _settings(loader: DataLoader, generator: torch.Generator | None) -> dict[str, Any]:
    settings: dict[str, Any] = dict(
        num_workers=loader.num_workers, collate_fn=loader.collate_fn, pin_memory=loader.pin_memory,
        timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        generator=generator if generator is not None else loader.generator,
        persistent_workers=loader.persistent_workers, pin_memory_device=loader.pin_memory_device,
    )
    if loader.num_workers > 0:
        settings["prefetch_factor"] = loader.prefetch_factor
    if hasattr(loader, "in_order"):
        settings["in_order"] = loader.in_order
    return settings
