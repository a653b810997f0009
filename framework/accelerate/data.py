"""Prepared dataloaders: this rank's batches of every pass (dealt out as Accelerate deals them), on the device,
with a position ``save_state`` keeps so a resumed loop gets the batches the interrupted one would have had."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, SequentialSampler

from framework.accelerate.batch_shards import BatchSamplerShard, batch_length, deal, rank_batch_count, repeated_batches
from framework.accelerate.gradient_state import GradientState
from framework.runtime.data_split import rebuilt_with_batch_sampler
from framework.runtime.epoch_order import epoch_order, plainly_shuffles


class RankBatches(BatchSamplerShard):
    """The batch sampler of a prepared map-style DataLoader: this rank's index batches of each pass.

    A pass's order is the one the loader's own sampler would give: unshuffled, or shuffled as
    ``RandomSampler`` shuffles (one process: from a seed drawn from torch's generator, so the
    order is a plain loop's; several: from ``shared_generator``, which every rank holds in the
    same state and each pass moves on, as Accelerate's synchronized generator). The pass's
    randomness is recorded (``order_record``), so ``replay`` can rebuild that order after a
    restart. Other batch samplers are dealt out as they batch, without a record.
    """

    def __init__(self, batch_sampler: Any, num_replicas: int, rank: int, even_batches: bool,
                 shared_generator: torch.Generator | None, data_seed: int | None = None) -> None:
        super().__init__(batch_sampler, num_replicas, rank, even_batches=even_batches)
        self.shared_generator = shared_generator
        self.data_seed = data_seed  # set: each pass's order is seeded with it plus the pass number
        sampler = getattr(batch_sampler, "sampler", None)
        self.plain = type(batch_sampler) is BatchSampler and (
            type(sampler) is SequentialSampler or plainly_shuffles(sampler))
        self.pass_index = 0
        self.order_record: dict[str, Any] | None = None
        self._start = 0
        self._replay: dict[str, Any] | None = None

    def prepare_pass(self, pass_index: int, start: int, replay: dict[str, Any] | None) -> None:
        """The next ``__iter__`` is pass ``pass_index`` from its batch ``start``, with ``replay``'s order if given."""
        self.pass_index, self._start, self._replay = pass_index, start, replay

    def __iter__(self) -> Iterator[list[int]]:
        # A generator, so the order is drawn at the first batch, after the DataLoader drew its workers' seed, as a
        # plain RandomSampler draws it: the same random numbers go to the same uses as in a plain loop. The whole
        # pass is dealt at once, so the remainder of its last round is known from its first batch.
        dealt = list(super().__iter__())
        yield from dealt[self._start:]

    def _pass_batches(self) -> Any:
        if not self.plain:
            self.order_record = None
            return iter(self.batch_sampler)
        order = self._order()
        size = self.batch_size
        batches = [order[start:start + size] for start in range(0, len(order), size)]
        return batches if not self.drop_last or not batches or len(batches[-1]) == size else batches[:-1]

    def _order(self) -> list[int]:
        sampler = self.batch_sampler.sampler
        length = len(sampler)
        replay, self._replay = self._replay, None
        if type(sampler) is SequentialSampler:
            self.order_record = {}
            return list(range(length))
        if self.data_seed is not None:  # Accelerate's seedable sampler: set_epoch chooses the pass's order
            self.order_record = {}
            return epoch_order(length, True, self.data_seed, self.pass_index)  # a list when shuffled
        if self.num_processes > 1 or sampler.generator is not None:
            # Several ranks: every rank's copy of the shared generator draws the same order, a new one each pass.
            # One process with the user's generator: it decides, and moves on as RandomSampler moves it.
            generator = self.shared_generator if self.num_processes > 1 else sampler.generator
            if replay is not None:
                generator.set_state(replay["generator_state"])
            self.order_record = {"generator_state": generator.get_state()}
            order = torch.randperm(length, generator=generator).tolist()
            torch.randperm(length, generator=generator)  # RandomSampler draws once more at its end: move on the same
            return order
        seed = replay["seed"] if replay is not None else int(torch.empty((), dtype=torch.int64).random_().item())
        self.order_record = {"seed": seed}
        return torch.randperm(length, generator=torch.Generator().manual_seed(seed)).tolist()


class PreparedDataLoader:
    """What ``accelerator.prepare`` makes of a DataLoader: iterating it yields this rank's batches on the device.

    Batch ``i`` of a pass goes to rank ``i mod N``; with ``even_batches`` (the default) the last
    round is completed from the pass's first samples so every rank runs as many batches.
    While it is iterated, ``accelerator.gradient_state`` knows whether the current batch is
    the pass's last. ``state_dict()`` holds the position in the pass (saved by ``save_state``),
    and after ``load_state_dict`` the next pass continues the interrupted one.

    Example::

        loader = accelerator.prepare(DataLoader(dataset, batch_size=32, shuffle=True))
        for x, y in loader:   # on accelerator.device; this rank's share
            ...
    """

    def __init__(self, loader: Any, gradient_state: GradientState, num_replicas: int, rank: int, even_batches: bool,
                 shared_generator: torch.Generator | None, place: Any, data_seed: int | None = None) -> None:
        self.base_dataloader = loader
        self.gradient_state = gradient_state
        self.num_replicas = num_replicas
        self.rank = rank
        self.even_batches = even_batches
        self._place = place
        self._batches: RankBatches | None = None
        self._loader = loader
        if isinstance(loader, DataLoader) and loader.batch_sampler is not None and not isinstance(
                loader.dataset, IterableDataset):
            self._batches = RankBatches(loader.batch_sampler, num_replicas, rank, even_batches, shared_generator,
                                        data_seed)
            self._loader = rebuilt_with_batch_sampler(loader, self._batches)
        self._passes = 0  # passes started (the next one's number when none runs)
        self._position = 0  # batches handed out in the current pass
        self._in_pass = False
        self._at_end = False  # the batch handed out last was its pass's last
        self._resume: dict[str, Any] | None = None
        # A restored position at the end of its pass: what skip_first_batches(loader, n >= position) finishes.
        self._finished: dict[str, Any] | None = None
        # torch's random state from just before the batch fetched ahead was loaded: a resumed pass loads that
        # batch from it again, so masks drawn while loading come out as in the uninterrupted run
        self._ahead_rng: torch.Tensor | None = None

    # -- Accelerate's DataLoader attributes ---
    @property
    def total_batch_size(self) -> int:
        """The samples of one round over all ranks: the batch size times the number of processes."""
        return (self.batch_size or 1) * self.num_replicas

    @property
    def total_dataset_length(self) -> int:
        """The number of samples in the dataset."""
        return len(self.base_dataloader.dataset)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass number ``epoch`` (shuffled orders of several ranks follow it)."""
        self._passes = epoch  # each pass tells a sampler of its own its epoch (_dealt_pass)

    def __len__(self) -> int:
        if self._batches is not None:
            return len(self._batches)
        return rank_batch_count(len(self._loader), self.num_replicas, self.rank, False, self.even_batches)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("base_dataloader", "_loader"):
            raise AttributeError(name)
        return getattr(self.base_dataloader, name)

    # -- iteration ---
    def __iter__(self) -> Iterator[Any]:
        return self.iterate()

    def iterate(self, skip: int | None = None) -> Iterator[Any]:
        """One pass, from batch ``skip`` when given (``skip_first_batches``), else from where a restored
        position left it, else from its start."""
        resume, self._resume = self._resume, None
        finished, self._finished = self._finished, None
        if skip is not None and finished is not None and skip >= finished["position"]:
            return  # "skip what the saved pass had done" of a pass that was done: the next iteration is the next pass
        pass_index, start, replay = (resume["pass"], resume["position"], resume["order"]) if resume else (
            self._passes, 0, None)
        if skip is not None:
            start = skip
        self._passes, self._position, self._in_pass, self._at_end = pass_index + 1, start, True, False
        if self._batches is not None:
            self._batches.prepare_pass(pass_index, start, replay)
            batches = self._indexed_pass(resume is not None)
        else:
            batches = self._dealt_pass(pass_index, start)
        current = self.gradient_state.begin(self)
        try:
            for batch, last, remainder in batches:
                self._position += 1
                self._at_end = current.at_end = last
                current.remainder = remainder
                yield self._place(batch)
            self._in_pass = False
        finally:
            self.gradient_state.end(current)

    def _indexed_pass(self, restored: bool) -> Iterator[tuple[Any, bool, int]]:
        """The rebuilt DataLoader's batches, each with whether it is the pass's last and its round's real count."""
        rng = torch.get_rng_state() if restored else None
        iterator = iter(self._loader)
        if rng is not None:  # the restored random state is the interrupted run's: undo the DataLoader's seed draw
            torch.set_rng_state(rng)
            if self._ahead_rng is not None:  # the interrupted run had loaded the next batch from this state
                torch.set_rng_state(self._ahead_rng)
                ahead = list(itertools.islice(iterator, 1))
                torch.set_rng_state(rng)
                iterator = itertools.chain(ahead, iterator)
        for batch, last in self._one_ahead(iterator):
            yield batch, last, self._batches.remainder if last else 0

    def _dealt_pass(self, pass_index: int, start: int) -> Iterator[tuple[Any, bool, int]]:
        """Batches of a loader that cannot be rebuilt (an iterable dataset), dealt out as they come, looking one
        batch ahead to know the last."""
        sampler = getattr(self._loader, "sampler", None)
        if callable(getattr(sampler, "set_epoch", None)):
            sampler.set_epoch(pass_index)
        last_round = repeated_batches(self.num_replicas) if self.even_batches else "uneven"
        source = deal(self._loader, self.num_replicas, self.rank, batch_length, None, last_round)
        for _ in range(start):
            if next(source, None) is None:
                return
        for (batch, remainder), last in self._one_ahead(source):
            yield batch, last, remainder if last else 0

    def _one_ahead(self, iterator: Iterator[Any]) -> Iterator[tuple[Any, bool]]:
        """Each item with whether it is the last, the next one fetched before this one is handed out.

        Accelerate's loaders run one batch ahead the same way, so a batch's collate function (or a
        dataset's ``__getitem__``) draws its random numbers before the previous batch's forward pass
        does: a loop switched from Accelerate gets the same masks and the same dropout.
        """
        end = object()
        ahead = next(iterator, end)
        while ahead is not end:
            self._ahead_rng = torch.get_rng_state()
            item, ahead = ahead, next(iterator, end)
            yield item, ahead is end
        self._ahead_rng = None

    # -- the position, for save_state ---
    def state_dict(self) -> dict[str, Any]:
        """Where this loader stands: passes started, whether one runs and how many of its batches were handed out,
        and the randomness of its order. A pass whose last batch was handed out counts as done (``in_pass`` False,
        ``finished`` True), as Accelerate marks it (``_iterator_finished``): the resumed loop's next pass is the
        next one, as its own epoch count expects."""
        running = self._in_pass and not self._at_end
        record = self._batches.order_record if self._batches is not None and running else None
        shared = self._batches.shared_generator if self._batches is not None else None
        return {"passes": self._passes, "in_pass": running, "position": self._position, "order": record,
                "finished": self._in_pass and self._at_end,
                "shared_generator": shared.get_state() if shared is not None else None}

    def rank_state(self) -> dict[str, Any]:
        """What this rank alone knows of its position (saved with the rank's random state): torch's random state
        from before the batch it fetched ahead was loaded, or None."""
        return {"ahead_rng": self._ahead_rng if self._in_pass and not self._at_end else None}

    def load_rank_state(self, state: dict[str, Any]) -> None:
        """Restore ``rank_state()``; the next pass, if it continues an interrupted one, reloads that batch from it."""
        self._ahead_rng = state.get("ahead_rng")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: the next iteration finishes the pass it was in, or starts the one after (a pass
        saved at its last batch is done; ``skip_first_batches`` past its position then yields nothing)."""
        self._passes = state["passes"]
        shared = self._batches.shared_generator if self._batches is not None else None
        if shared is not None and state.get("shared_generator") is not None:  # the next pass draws as it would have
            shared.set_state(state["shared_generator"])
        self._resume = None
        self._finished = {"position": state["position"]} if state.get("finished") else None
        if state["in_pass"]:
            self._resume = {"pass": state["passes"] - 1, "position": state["position"], "order": state["order"]}

    def __repr__(self) -> str:
        return f"PreparedDataLoader({self.base_dataloader!r}, rank {self.rank} of {self.num_replicas})"


def prepared_loader(loader: Any, runtime: Any, gradient_state: GradientState, num_replicas: int, rank: int,
                    even_batches: bool, place: Callable[[Any], Any], seedable: bool = False,
                    data_seed: int | None = None) -> PreparedDataLoader:
    """``loader`` prepared for rank ``rank`` of ``num_replicas``, its batches put in place by ``place``.

    A shuffled loader's order follows Accelerate's: with ``seedable`` (its ``use_seedable_sampler``),
    seeded by ``data_seed`` (else torch's initial seed) plus the pass number, which ``set_epoch``
    chooses; otherwise as a RandomSampler draws it on one process, and from a generator the
    ranks share on several.
    """
    sampler = getattr(loader, "sampler", None)
    shuffled = isinstance(loader, DataLoader) and type(sampler) is RandomSampler
    seed = None
    if shuffled and seedable:
        seed = runtime.broadcast(data_seed if data_seed is not None else torch.initial_seed())
    shared = shared_generator(runtime, sampler.generator) if shuffled and seed is None and num_replicas > 1 else None
    return PreparedDataLoader(loader, gradient_state, num_replicas, rank, even_batches, shared, place, seed)


def shared_generator(runtime: Any, given: torch.Generator | None) -> torch.Generator:
    """The generator the ranks draw a shuffled loader's orders from, in rank 0's state on every rank: the one the
    loader was given, else a new one seeded from torch's generator, drawn as Accelerate draws it, so several
    processes shuffle as they do under Accelerate."""
    generator = torch.Generator()
    if given is not None:
        generator.set_state(runtime.broadcast(given.get_state()))
    else:
        generator.manual_seed(runtime.broadcast(int(torch.empty((), dtype=torch.int64).random_().item())))
    return generator


class SkippedDataLoader:
    """``skip_first_batches(loader, n)``: each iteration of it is ``loader``'s pass from batch ``n``."""

    def __init__(self, loader: PreparedDataLoader, num_batches: int) -> None:
        self.loader = loader
        self.num_batches = num_batches

    def __iter__(self) -> Iterator[Any]:
        return self.loader.iterate(skip=self.num_batches)

    def __len__(self) -> int:
        return max(len(self.loader) - self.num_batches, 0)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)


def skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
    """``dataloader``'s current pass from batch ``num_batches``: a prepared loader skips without loading those
    batches; any other iterable drops them as it goes."""
    if isinstance(dataloader, PreparedDataLoader):
        return SkippedDataLoader(dataloader, num_batches)
    return _Skipped(dataloader, num_batches)


class _Skipped:
    def __init__(self, iterable: Any, count: int) -> None:
        self.iterable, self.count = iterable, count

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.iterable), self.count, None)

    def __len__(self) -> int:
        return max(len(self.iterable) - self.count, 0)

