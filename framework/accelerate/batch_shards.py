"""Dealing a pass's batches out to the ranks as Accelerate does: batch i to rank i mod N, the last round
completed so every rank gets a batch of full size (or not, or dropped), and which of its samples are real.

The ranks' batches of one round, joined in rank order, are the pass's batches in order, so
gathering them gives back the dataset in order; the samples that complete the last round
repeat the pass's first ones and come last, so ``gather_for_metrics`` can cut them off.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from torch.utils.data import IterableDataset, Sampler

from framework.errors import MisconfigurationError
from framework.nested import extract_batch_size, map_tensors

# What each rank yields: (its batch, how many samples of that round are real, or 0 when none is repeated).
Dealt = tuple[Any, int]
# Completes the last round: (its batches, the first round's) -> num_replicas batches.
Completion = Callable[[list[Any], list[Any]], list[Any]]


def deal(batches: Iterable[Any], num_replicas: int, rank: int, size: Callable[[Any], int], full_size: int | None,
         last_round: str | Completion) -> Iterator[Dealt]:
    """Rank ``rank``'s batches of ``batches``, each with the real-sample count of its round (0: a complete round).

    A round is complete when it has ``num_replicas`` batches of ``full_size`` (any size when
    None). The last, incomplete round is dropped (``last_round="drop"``: the loader's
    ``drop_last``), handed out as it is so the ranks past its batches get none (``"uneven"``:
    ``even_batches=False``), or completed by ``last_round(round, first_round)`` to
    ``num_replicas`` full batches whose repeated samples come last.
    """
    first_round: list[Any] = []
    current: list[Any] = []
    for batch in batches:
        if len(first_round) < num_replicas:
            first_round.append(batch)
        current.append(batch)
        if len(current) == num_replicas and (full_size is None or size(batch) == full_size):
            yield current[rank], 0
            current = []
    if not current or last_round == "drop":
        return
    real = sum(size(batch) for batch in current)
    if last_round == "uneven":
        if rank < len(current):
            yield current[rank], real
        return
    yield last_round(current, first_round)[rank], real


def filled_indices(num_replicas: int, batch_size: int) -> Completion:
    """Complete a last round of index batches to ``num_replicas`` batches of ``batch_size``, taking the missing
    indices from the start of the pass (again and again when the pass is shorter than one round)."""

    def complete(current: list[list[int]], first_round: list[list[int]]) -> list[list[int]]:
        indices = [index for batch in current for index in batch]
        start = [index for batch in first_round for index in batch]
        missing = num_replicas * batch_size - len(indices)
        indices += (start * (missing // len(start) + 1))[:missing]
        return [indices[i * batch_size:(i + 1) * batch_size] for i in range(num_replicas)]

    return complete


def repeated_batches(num_replicas: int) -> Completion:
    """Complete a last round of batches (collated objects) with the first round's batches of the missing ranks."""

    def complete(current: list[Any], first_round: list[Any]) -> list[Any]:
        return current + [first_round[index % len(first_round)] for index in range(len(current), num_replicas)]

    return complete


def batch_length(batch: Any) -> int:
    """How many samples a collated batch holds: its first tensor's length, else (a list of strings) its own."""
    tensors: list[Any] = []
    map_tensors(batch, tensors.append)
    if tensors:
        return extract_batch_size(batch)
    return len(batch) if hasattr(batch, "__len__") else 1


def rank_batch_count(total: int, num_replicas: int, rank: int, drop_last: bool, even_batches: bool) -> int:
    """How many of a pass's ``total`` batches rank ``rank`` gets."""
    if drop_last:
        return total // num_replicas
    if even_batches:
        return -(-total // num_replicas)
    return len(range(rank, total, num_replicas))


class BatchSamplerShard(Sampler[list[int]]):
    """Rank ``process_index``'s batches of ``batch_sampler`` (Accelerate's name and arguments): batch ``i`` of each
    pass goes to process ``i mod num_processes``; with ``even_batches`` the last round is completed from the
    pass's first indices, so every process gets as many full batches.

    Example::

        shard = BatchSamplerShard(BatchSampler(range(10), 3, False), num_processes=2, process_index=1)
        list(shard)   # [[3, 4, 5], [9, 0, 1]]
    """

    def __init__(self, batch_sampler: Any, num_processes: int = 1, process_index: int = 0,
                 split_batches: bool = False, even_batches: bool = True) -> None:
        if split_batches:
            raise MisconfigurationError("BatchSamplerShard(split_batches=True) is not supported: each process takes "
                                        "whole batches. Divide the batch size by the number of processes instead.")
        self.batch_sampler = batch_sampler
        self.num_processes = num_processes
        self.process_index = process_index
        self.even_batches = even_batches
        self.batch_size = getattr(batch_sampler, "batch_size", None)
        self.drop_last = bool(getattr(batch_sampler, "drop_last", False))
        self.remainder = 0  # the samples the last dealt round really holds (0: a complete round)

    def __iter__(self) -> Iterator[list[int]]:
        self.remainder = 0
        for batch, real in deal(self._pass_batches(), self.num_processes, self.process_index, len, self.batch_size,
                                self._last_round()):
            self.remainder = real
            yield batch

    def __len__(self) -> int:
        return rank_batch_count(len(self.batch_sampler), self.num_processes, self.process_index, self.drop_last,
                                self.even_batches)

    def _pass_batches(self) -> Iterable[list[int]]:
        return iter(self.batch_sampler)

    def _last_round(self) -> str | Completion:
        if self.drop_last:
            return "drop"
        if not self.even_batches or self.num_processes == 1:  # one process keeps a short last batch as it is
            return "uneven"
        if self.batch_size is None:
            return repeated_batches(self.num_processes)
        return filled_indices(self.num_processes, self.batch_size)


class IterableDatasetShard(IterableDataset):
    """Process ``process_index``'s samples of an iterable ``dataset`` (Accelerate's name and arguments): of each
    ``batch_size * num_processes`` samples it takes its own ``batch_size``; the last, short round is dropped
    with ``drop_last`` or else completed from the first samples.

    Example::

        DataLoader(IterableDatasetShard(stream, batch_size=8, num_processes=2, process_index=rank), batch_size=8)
    """

    def __init__(self, dataset: Iterable[Any], batch_size: int = 1, drop_last: bool = False, num_processes: int = 1,
                 process_index: int = 0, split_batches: bool = False) -> None:
        if split_batches:
            raise MisconfigurationError("IterableDatasetShard(split_batches=True) is not supported: each process "
                                        "takes whole batches. Divide the batch size by the number of processes "
                                        "instead.")
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.num_processes = num_processes
        self.process_index = process_index

    def set_epoch(self, epoch: int) -> None:
        """Pass the epoch on to the dataset, when it shuffles by epoch."""
        if callable(getattr(self.dataset, "set_epoch", None)):
            self.dataset.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        last_round = "drop" if self.drop_last else filled_indices(self.num_processes, self.batch_size)
        for batch, _ in deal(self._groups(), self.num_processes, self.process_index, len, self.batch_size,
                             last_round):
            yield from batch

    def _groups(self) -> Iterator[list[Any]]:
        group: list[Any] = []
        for sample in self.dataset:
            group.append(sample)
            if len(group) == self.batch_size:
                yield group
                group = []
        if group:
            yield group

    def __len__(self) -> int:
        rounds, left = divmod(len(self.dataset), self.batch_size * self.num_processes)  # type: ignore[arg-type]
        return (rounds + (0 if self.drop_last or not left else 1)) * self.batch_size
