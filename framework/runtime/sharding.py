"""Splitting a sampler's order over the ranks: padded for training, contiguous and unpadded for evaluation."""

from __future__ import annotations

from collections.abc import Iterator

from torch.utils.data import Sampler, SequentialSampler


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
        if order and self.pad:
            padding = -len(order) % self.num_replicas
            order += (order * (padding // len(order) + 1))[:padding]
        return iter(order[self.rank::self.num_replicas])

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
