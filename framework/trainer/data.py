"""Finding the loaders of a stage, counting their batches, and applying the ``limit_*`` flags."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from torch.utils.data import DataLoader, SequentialSampler

from framework.errors import MisconfigurationError, describe

INFINITE = math.inf


def find_loaders(stage: str, given: Any, datamodule: Any, module: Any) -> list[Iterable] | None:
    """The loaders for ``stage`` ("train", "val", "test", "predict") as a list, or None if there are none.

    Taken from ``given`` first, then ``datamodule.<stage>_dataloader()``, then the Module's.
    """
    source = given
    method = f"{stage}_dataloader"
    for owner in (datamodule, module):
        if source is None and owner is not None and callable(getattr(owner, method, None)):
            source = getattr(owner, method)()
    if source is None:
        return None
    if isinstance(source, Mapping):
        raise MisconfigurationError(
            f"{method} returned a dict of loaders; pass a list of loaders instead (several are supported for "
            "val, test and predict)."
        )
    loaders = list(source) if isinstance(source, (list, tuple)) and not _is_batch_list(source) else [source]
    for loader in loaders:
        if not isinstance(loader, Iterable):
            raise MisconfigurationError(
                f"{method} gave {describe(loader)}; accepted: a DataLoader or any iterable of batches, or a list of them."
            )
    return loaders


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


def apply_limit(name: str, available: float, limit: int | float) -> float:
    """How many batches to run given ``limit`` (a count, or a fraction of ``available``)."""
    if isinstance(limit, float):
        if limit == 1.0:
            return available
        if available == INFINITE:
            if limit == 0.0:
                return 0
            raise MisconfigurationError(
                f"{name}={limit} is a fraction, but the loader has no length; give an int number of batches instead."
            )
        count = int(available * limit)
        if count == 0 and limit > 0:
            raise MisconfigurationError(
                f"{name}={limit} of {int(available)} batches rounds down to 0; raise it to at least {1 / available:.3g}."
            )
        return count
    return min(available, limit)


def limited(loader: Iterable, count: float) -> Iterator[Any]:
    """The first ``count`` batches of ``loader``."""
    if count == INFINITE:
        yield from loader
        return
    if count <= 0:
        return
    remaining = int(count)
    for batch in loader:
        yield batch
        remaining -= 1
        if remaining == 0:
            return


def with_sequential_order(loader: Iterable) -> Iterable:
    """``loader`` rebuilt without shuffling (used by ``overfit_batches``); other iterables as they are."""
    if not isinstance(loader, DataLoader) or isinstance(loader.sampler, SequentialSampler):
        return loader
    if loader.batch_sampler is not None and type(loader.batch_sampler).__name__ != "BatchSampler":
        return loader
    return DataLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        shuffle=False,
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        persistent_workers=loader.persistent_workers,
    )


def set_sampler_epoch(loader: Iterable, epoch: int) -> None:
    """Tell the loader's samplers which epoch it is (DistributedSampler shuffles by it)."""
    for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if sampler is not None and callable(getattr(sampler, "set_epoch", None)):
            sampler.set_epoch(epoch)
