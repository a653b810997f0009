"""Run code, print and warn on global rank 0 only: ``rank_zero_only`` and its helpers, as Lightning names them.

The rank is read from the launcher's environment (``RANK``, ``LOCAL_RANK``, ``SLURM_PROCID``) when this
module is imported, and set again by the Runtime once it knows the rank, so a function decorated at
import time in a user's script follows the run it is part of.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from framework import console

T = TypeVar("T")

_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def _rank_from_environment() -> int:
    for name in _RANK_VARIABLES:
        text = os.environ.get(name)
        if text is not None and text.strip().isdigit():
            return int(text)
    return 0


def rank_zero_only(fn: Callable[..., T], default: T | None = None) -> Callable[..., T | None]:
    """``fn`` that runs on global rank 0 only; elsewhere it returns ``default``.

    Example::

        @rank_zero_only
        def save_samples(images):
            torchvision.utils.save_image(images, "samples.png")
    """

    @functools.wraps(fn)
    def on_rank_zero(*args: Any, **kwargs: Any) -> T | None:
        return fn(*args, **kwargs) if rank_zero_only.rank == 0 else default

    on_rank_zero.runs_on_rank_zero_only = True  # type: ignore[attr-defined]  # what the Trainer asks of loggers
    return on_rank_zero


rank_zero_only.rank = _rank_from_environment()  # type: ignore[attr-defined]


def set_rank(rank: int) -> None:
    """Make ``rank_zero_only`` follow ``rank`` (the Runtime calls this once the ranks are known)."""
    rank_zero_only.rank = rank  # type: ignore[attr-defined]


def rank_zero_info(message: str, *args: Any, **kwargs: Any) -> None:
    """Log ``message`` at INFO through the ``"framework"`` logger, on rank 0 only."""
    if rank_zero_only.rank == 0:  # type: ignore[attr-defined]
        console.LOGGER.info(message, *args, **kwargs)


def rank_zero_debug(message: str, *args: Any, **kwargs: Any) -> None:
    """Log ``message`` at DEBUG through the ``"framework"`` logger, on rank 0 only."""
    if rank_zero_only.rank == 0:  # type: ignore[attr-defined]
        console.LOGGER.debug(message, *args, **kwargs)


def rank_zero_warn(message: str | Warning, category: type[Warning] = UserWarning, stacklevel: int = 2) -> None:
    """``warnings.warn`` on rank 0 only, shown at the caller's line."""
    if rank_zero_only.rank == 0:  # type: ignore[attr-defined]
        warnings.warn(message, category, stacklevel=stacklevel + 1)


def rank_zero_deprecation(message: str, stacklevel: int = 2) -> None:
    """``rank_zero_warn`` with a ``DeprecationWarning``."""
    rank_zero_warn(message, DeprecationWarning, stacklevel=stacklevel + 1)


def _get_rank() -> int:
    """This process's global rank as its launcher's environment says (0 where none says), Lightning's helper."""
    return _rank_from_environment()
