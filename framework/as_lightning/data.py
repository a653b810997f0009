"""Lightning's ``utilities.data`` helpers that libraries import: batch sizes, lengths, and a DataLoader rebuilt
around another sampler.

Example::

    loader = _update_dataloader(loader, DistributedSampler(loader.dataset))
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader, Sampler

from framework.nested import extract_batch_size
from framework.runtime.data_split import rebuilt

__all__ = ["_update_dataloader", "extract_batch_size", "has_len", "sized_len"]


def sized_len(dataloader: object) -> int | None:
    """``len(dataloader)``, or None when it has none."""
    try:
        return len(dataloader)  # type: ignore[arg-type]
    except (TypeError, NotImplementedError):
        return None


def has_len(dataloader: object) -> bool:
    """Whether ``dataloader`` has a length."""
    return sized_len(dataloader) is not None


def _update_dataloader(dataloader: DataLoader, sampler: Sampler, mode: Any = None) -> DataLoader:
    """A DataLoader like ``dataloader`` in every setting, drawing its indices from ``sampler`` (``mode`` is
    accepted for Lightning's signature)."""
    return rebuilt(dataloader, sampler)
