"""Finding the loaders of a stage, counting their batches, and applying the ``limit_*`` flags."""

from __future__ import annotations

import functools
import itertools
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, Dataset, SequentialSampler

from framework import console
from framework.errors import MisconfigurationError, describe
from framework.hooks import overrides
from framework.loader_hooks import LoaderHooks
from framework.module import Module
from framework.runtime.data_split import rebuilt
from framework.seed import seed_worker
from framework.trainer.sampler import with_eval_shard, with_resumable_sampler
from framework.utilities.combined_loader import CombinedLoader
from framework.utilities.warnings import PossibleUserWarning

if TYPE_CHECKING:
    from framework.trainer.run import Run

INFINITE = math.inf


def find_loaders(stage: str, given: Any, datamodule: Any, module: Any) -> list[Iterable] | None:
    """The loaders for ``stage`` ("train", "val", "test", "predict") as a list, or None if there are none.

    Taken from ``given`` first, then ``datamodule.<stage>_dataloader()``, then the Module's.
    """
    source = given
    method = f"{stage}_dataloader"
    for owner in (datamodule, module):
        if source is None and defines_loader(owner, method):
            source = getattr(owner, method)()
    if source is None:
        return None
    if isinstance(source, CombinedLoader):
        return _combined_loaders(stage, source)
    if isinstance(source, Mapping) and source and all(_looks_like_loader(v) for v in source.values()):
        source = list(source.values())  # a dict of loaders runs them in order, dataloader_idx 0, 1, ...
    loaders = list(source) if isinstance(source, (list, tuple)) and not _is_batch_list(source) else [source]
    for loader in loaders:
        if isinstance(loader, Dataset) and not isinstance(loader, Iterable):
            raise MisconfigurationError(
                f"{method} gave a Dataset ({type(loader).__name__}); wrap it in a DataLoader, e.g. "
                "DataLoader(dataset, batch_size=32), so it yields batches."
            )
        if not isinstance(loader, Iterable) or isinstance(loader, (str, bytes, Mapping)):
            raise MisconfigurationError(
                f"{method} gave {describe(loader)}; accepted: a DataLoader or any iterable of batches, "
                "or a list (or dict) of them."
            )
    return loaders


def _combined_loaders(stage: str, combined: CombinedLoader) -> list[Iterable]:
    """Training takes a CombinedLoader as one loader of combined batches, evaluation the loaders of a sequential
    one in turn (``dataloader_idx`` 0, 1, ...); the other pairings are refused, as Lightning refuses them."""
    if stage == "train" and combined.mode != "sequential":
        return [combined]
    if stage != "train" and combined.mode == "sequential":
        return list(combined.flattened)
    accepted = "any mode but 'sequential'" if stage == "train" else "mode='sequential'"
    raise MisconfigurationError(
        f"{stage}_dataloader gave CombinedLoader(mode={combined.mode!r}); {stage} takes {accepted} (a dict or list "
        "of loaders runs them in turn)."
    )


def each_loader(loader: Any, change: Callable[[Any], Any]) -> Any:
    """``change(loader)``; for a CombinedLoader, a new one of ``change`` applied to each of its loaders."""
    if isinstance(loader, CombinedLoader):
        rebuilt_loader = CombinedLoader(loader.iterables, loader.mode)
        rebuilt_loader.flattened = [change(inner) for inner in loader.flattened]
        return rebuilt_loader
    return change(loader)


def _is_batch_list(source: list | tuple) -> bool:
    """A plain list of batches (tensors, tuples of tensors) is one loader, not a list of loaders."""
    return bool(source) and not any(isinstance(item, DataLoader) or _looks_like_loader(item) for item in source)


def _looks_like_loader(item: Any) -> bool:
    return isinstance(item, Iterable) and not isinstance(item, (list, tuple, dict, str)) and not hasattr(item, "shape")


def batch_count(loader: Iterable) -> float:
    """``len(loader)``, or infinity for an iterable without a length."""
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return INFINITE


def apply_limit(name: str, available: float, limit: int | float, whole: float | None = None) -> float:
    """How many batches to run given ``limit`` (a count, or a fraction of ``available``).

    ``whole``: the batches of the whole loader when ``available`` is one rank's part of it. A
    fraction must leave at least one batch of the whole; then every rank with batches runs at
    least one (one process runs ``int(whole * limit)``, the ranks about as many together).
    """
    if isinstance(limit, float):
        if limit == 1.0:
            return available
        if available == INFINITE:
            if limit == 0.0:
                return 0
            raise MisconfigurationError(
                f"{name}={limit} is a fraction, but the loader has no length; give an int number of batches instead."
            )
        whole = available if whole is None else whole
        if int(whole * limit) == 0 and limit > 0:
            raise MisconfigurationError(
                f"{name}={limit} of {int(whole)} batches rounds down to 0; raise it to at least {1 / whole:.3g}."
            )
        return max(int(available * limit), min(available, 1)) if limit > 0 else 0
    return min(available, limit)


def limited(loader: Iterable, count: float) -> Iterator[Any]:
    """The first ``count`` batches of ``loader`` (it is not asked for one more)."""
    if count == INFINITE:
        return iter(loader)
    if count <= 0:
        return iter(())  # without iter(loader), which would start a DataLoader's workers
    return itertools.islice(loader, int(count))


def with_sequential_order(loader: Iterable, stage: str) -> Iterable:
    """``loader`` of ``stage`` ("train", "val") rebuilt with a ``SequentialSampler`` (used by ``overfit_batches``,
    as in Lightning, warning once per loader); other iterables as they are."""
    if not isinstance(loader, DataLoader) or isinstance(loader.sampler, SequentialSampler):
        return loader
    if loader.batch_sampler is not None and type(loader.batch_sampler).__name__ != "BatchSampler":
        return loader
    console.warn_user(f"You requested to overfit but enabled {stage} dataloader shuffling. We are turning off the "
                      f"{stage} dataloader shuffling for you.")
    return rebuilt(loader, SequentialSampler(loader.dataset))


def set_sampler_epoch(loader: Iterable, epoch: int) -> None:
    """Tell the loader's samplers which epoch it is (DistributedSampler shuffles by it), once each."""
    if isinstance(loader, CombinedLoader):
        for inner in loader.flattened:
            set_sampler_epoch(inner, epoch)
        return
    samplers = (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None))
    for position, sampler in enumerate(samplers):
        if sampler is None or any(sampler is earlier for earlier in samplers[:position]):
            continue
        if callable(getattr(sampler, "set_epoch", None)):
            sampler.set_epoch(epoch)


def load_train_data(run: Run) -> None:
    """Ask for the training loader and count its batches (the RunContext's ``train_loader``,
    ``num_training_batches``).

    Called when training starts (after the sanity check, as in Lightning), earlier if
    ``estimated_stepping_batches`` is read first, and again when a reload is due.
    """
    loaders = find_loaders("train", run.context.given_loaders.get("train"), run.datamodule, run.module)
    if loaders is None:
        raise no_training_data()
    if len(loaders) != 1:
        raise MisconfigurationError(f"trainer.fit got {len(loaders)} training loaders; pass exactly one.")
    given = each_loader(loaders[0], seed_workers_if_asked)
    replicas, rank = sampler_ranks(run)
    if run.settings.overfit_batches:  # the same first batches every epoch, from a SequentialSampler as in Lightning
        loader = each_loader(given, lambda inner: with_sequential_order(inner, "train"))
        if replicas > 1:
            loader = each_loader(loader, lambda inner: with_resumable_sampler(inner, lambda: (0, False), replicas,
                                                                              rank))
    else:
        seed = functools.partial(shuffle_seed, run.state, run.runtime)
        loader = each_loader(given, lambda inner: with_resumable_sampler(inner, seed, replicas, rank))
    available = batch_count(loader)
    if available == 0:
        raise MisconfigurationError(
            "The training dataloader is empty (0 batches): check the dataset's length, batch_size and drop_last."
        )
    name = "overfit_batches" if run.settings.overfit_batches else "limit_train_batches"
    context = run.context
    context.train_loader = loader
    context.num_training_batches = apply_limit(name, available, getattr(run.settings, name), whole=batch_count(given))
    context.val_check_batch = val_check_batch(run.settings.val_check_interval, run.settings.check_val_every_n_epoch,
                                              context.num_training_batches)
    context.loaded_at["train"] = run.state.current_epoch
    if run.loggers and context.num_training_batches < run.settings.log_every_n_steps and not run.settings.fast_dev_run \
            and run.is_global_zero:
        console.warn_user(
            f"The number of training batches ({context.num_training_batches}) is smaller than the logging interval "
            f"Trainer(log_every_n_steps={run.settings.log_every_n_steps}). Set a lower value for log_every_n_steps if "
            "you want to see logs for the training epoch.", PossibleUserWarning
        )


def shuffle_seed(state: Any, runtime: Any) -> tuple[int, bool]:
    """The run's seed for the training data's order, and whether it was drawn now: the checkpoint's when resuming,
    else drawn once from torch's generator (so ``seed_everything`` or ``torch.manual_seed`` decide it), rank 0's
    for every rank."""
    if state.shuffle_seed >= 0:
        return state.shuffle_seed, False
    state.shuffle_seed = runtime.broadcast(int(torch.randint(0, 2**62, ())))
    return state.shuffle_seed, True


def any_rank_has_batches(run: Run, counts: list[float]) -> bool:
    """Whether any rank has a batch to run in ``counts``: a rank whose part is empty still joins the loop's
    epoch end (its collectives), so an evaluation runs everywhere or nowhere."""
    mine = any(counts)
    return run.runtime.reduce_boolean_decision(mine, all=False) if run.world_size > 1 else mine


def sampler_ranks(run: Run) -> tuple[int, int]:
    """``(num_replicas, rank)`` to shard loaders by; ``(1, 0)`` with ``use_distributed_sampler=False``."""
    shards = run.runtime.strategy.distributed_sampler_kwargs
    if not run.settings.use_distributed_sampler or shards is None:
        return 1, 0
    return shards["num_replicas"], shards["rank"]


def for_this_rank(run: Run, loader: Iterable) -> Iterable:
    """An evaluation ``loader`` holding only this rank's contiguous part of the data (each sample on one rank)."""
    replicas, rank = sampler_ranks(run)
    return with_eval_shard(seed_workers_if_asked(loader), replicas, rank)


def no_training_data() -> MisconfigurationError:
    """The error for a fit without training data."""
    return MisconfigurationError(
        "trainer.fit found no training data: pass train_dataloaders=, a datamodule=, or define "
        "train_dataloader() on the Module."
    )


def val_is_defined(run: Run) -> bool:
    """Whether fit validates: a ``validation_step``, a source of validation data, and a limit above 0.

    Decided without asking for the loaders, which are requested only when validation first runs.
    """
    limit = run.settings.overfit_batches if run.settings.overfit_batches else run.settings.limit_val_batches
    if limit == 0 or not overrides(run.module, Module, "validation_step"):
        return False
    return has_loader_source(run, "val")


def has_loader_source(run: Run, stage: str) -> bool:
    """Whether loaders for ``stage`` were given, or the DataModule or Module has ``<stage>_dataloader``."""
    if run.context.given_loaders.get(stage) is not None:
        return True
    method = f"{stage}_dataloader"
    return any(defines_loader(owner, method) for owner in (run.datamodule, run.module))


def defines_loader(owner: Any, method: str) -> bool:
    """Whether ``owner`` (a Module, a DataModule, or None) defines ``method`` itself (or has it set), not only
    the default that says it is missing."""
    if owner is None:
        return False
    if isinstance(owner, LoaderHooks):
        return overrides(owner, LoaderHooks, method)
    return callable(getattr(owner, method, None))  # a duck-typed data source


def load_val_data(run: Run) -> None:
    """Ask for fit's validation loaders and count their batches (the RunContext's ``val_loaders``,
    ``val_batch_counts``)."""
    context = run.context
    loaders = find_loaders("val", context.given_loaders.get("val"), run.datamodule, run.module) or []
    if run.settings.overfit_batches:
        loaders = [with_sequential_order(loader, "val") for loader in loaders]
    name = "overfit_batches" if run.settings.overfit_batches else "limit_val_batches"
    context.val_loaders, context.val_batch_counts = rank_parts(run, loaders, name, getattr(run.settings, name))
    context.loaded_at["val"] = run.state.current_epoch


def reload_due(run: Run, stage: str) -> bool:
    """Whether the ``stage`` ("train" or "val") loaders must be requested (again) now."""
    last = run.context.loaded_at.get(stage)
    if last is None:
        return True
    n = run.settings.reload_dataloaders_every_n_epochs
    return bool(n) and run.state.current_epoch - last >= n


def val_check_batch(interval: int | float, every_n_epochs: int | None, total: float) -> float:
    """After how many training batches validation runs (counted in the epoch, or overall without epochs: the
    Trainer refuses a fraction given with check_val_every_n_epoch=None, and the default 1.0 means an epoch's
    worth, as in Lightning)."""
    if isinstance(interval, int):
        if every_n_epochs is not None and total != INFINITE and interval > total:
            raise MisconfigurationError(
                f"Trainer(val_check_interval={interval}) is more than the {int(total)} training batches of an "
                "epoch. Lower it, or set check_val_every_n_epoch=None to count batches across epochs."
            )
        return interval
    if total == INFINITE:
        if interval != 1.0:
            raise MisconfigurationError(
                f"Trainer(val_check_interval={interval}) is a fraction of an epoch, but the training loader has "
                "no length; give an int number of batches."
            )
        return INFINITE
    return max(1, int(total * interval))


def eval_data(run: Run, stage: str, limit: int | float) -> tuple[list[Iterable], list[float]]:
    """The loaders of ``stage`` ("val", "test", "predict") and how many batches of each to run."""
    loaders = find_loaders(stage, run.context.given_loaders.get(stage), run.datamodule, run.module)
    if loaders is None:
        raise MisconfigurationError(
            f"No {stage} data: pass dataloaders=, a datamodule=, or define {stage}_dataloader() on the Module."
        )
    if all(batch_count(loader) == 0 for loader in loaders) and limit != 0:
        raise MisconfigurationError(f"The {stage} dataloader is empty (0 batches).")
    return rank_parts(run, loaders, f"limit_{stage}_batches", limit)


def rank_parts(run: Run, loaders: list[Iterable], name: str, limit: int | float) -> tuple[list, list[float]]:
    """This rank's part of each evaluation loader, and how many of its batches to run under ``limit`` (``name``)."""
    parts = [for_this_rank(run, loader) for loader in loaders]
    counts = [apply_limit(name, batch_count(part), limit, whole=batch_count(loader))
              for part, loader in zip(parts, loaders, strict=True)]
    return parts, counts


def seed_workers_if_asked(loader: Iterable) -> Iterable:
    """After ``seed_everything(workers=True)``, DataLoader workers seed ``random`` and NumPy distinctly."""
    if (os.environ.get("PL_SEED_WORKERS") == "1" and isinstance(loader, DataLoader) and loader.num_workers > 0
            and loader.worker_init_fn is None):
        loader.worker_init_fn = seed_worker
    return loader


def numbered_batches(loader: Iterable, total: float, skip: int, fetch_skipped: bool) -> Iterator[tuple[int, Any, bool]]:
    """``(batch_idx, batch, is_last)`` for the first ``total`` batches, after skipping ``skip`` of them (fetched
    and dropped with ``fetch_skipped``; else the loader already starts past them)."""
    if fetch_skipped:
        batches: Iterator[Any] = itertools.islice(limited(loader, total), skip, None)
    else:
        batches = limited(loader, total - skip)
    if total != INFINITE:
        last = int(total) - 1
        for batch_idx, batch in enumerate(batches, start=skip):
            yield batch_idx, batch, batch_idx == last
        return
    # No length: look one batch ahead to know which is last.
    batch_idx = skip
    try:
        current = next(batches)
    except StopIteration:
        return
    for upcoming in batches:
        yield batch_idx, current, False
        current = upcoming
        batch_idx += 1
    yield batch_idx, current, True
