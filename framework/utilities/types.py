"""The type aliases Lightning code annotates its hooks with (``STEP_OUTPUT``, ``OptimizerLRScheduler``, ...)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim import Optimizer

#: What a step returns: a loss tensor, a dict holding ``"loss"``, or None.
STEP_OUTPUT = torch.Tensor | Mapping[str, Any] | None
#: What ``train_dataloader`` may return.
TRAIN_DATALOADERS = Any
#: What ``val_dataloader``, ``test_dataloader`` and ``predict_dataloader`` may return.
EVAL_DATALOADERS = Any
#: What ``configure_optimizers`` may return.
OptimizerLRScheduler = (Optimizer | Sequence[Optimizer] | tuple[Sequence[Optimizer], Sequence[Any]]
                        | Mapping[str, Any] | Iterable[Mapping[str, Any]] | None)
#: Lightning's alias for a scheduler object.
LRSchedulerTypeUnion = Any


@dataclass
class LRSchedulerConfig:
    """One LR scheduler and when to step it (what ``configure_optimizers`` returned, read into one form)."""

    scheduler: Any
    name: str | None = None
    interval: str = "epoch"
    frequency: int = 1
    reduce_on_plateau: bool = False
    monitor: str | None = None
    strict: bool = True


__all__ = ["EVAL_DATALOADERS", "LRSchedulerConfig", "LRSchedulerTypeUnion", "OptimizerLRScheduler", "STEP_OUTPUT",
           "TRAIN_DATALOADERS"]
