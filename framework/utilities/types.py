"""The type aliases Lightning code annotates its hooks with (``STEP_OUTPUT``, ``OptimizerLRScheduler``, ...)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypedDict, runtime_checkable

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
#: Lightning's other names for a scheduler object.
LRSchedulerPLType = LRScheduler = Any
#: What a ``validate``/``test`` call returns: one dict of metrics per dataloader.
_EVALUATE_OUTPUT = list[Mapping[str, float]]
#: What a ``predict`` call returns.
_PREDICT_OUTPUT = list[Any] | list[list[Any]]

class LRSchedulerConfigType(TypedDict, total=False):
    """The dict form of one scheduler in ``configure_optimizers``' return value."""

    scheduler: Any
    name: str | None
    interval: str
    frequency: int
    reduce_on_plateau: bool
    monitor: str | None
    strict: bool


class OptimizerLRSchedulerConfig(TypedDict, total=False):
    """The dict ``configure_optimizers`` may return: ``{"optimizer": ..., "lr_scheduler": ..., "monitor": ...}``."""

    optimizer: Optimizer
    lr_scheduler: Any
    monitor: str


#: A path: a string (local or any fsspec URL) or a ``pathlib.Path``.
_PATH = str | Path
#: A device as arguments take it: ``torch.device("cuda:0")``, ``"cuda:0"`` or ``0``.
_DEVICE = torch.device | str | int
#: ``map_location`` as ``torch.load`` takes it.
_MAP_LOCATION_TYPE = Callable[[Any, str], Any] | torch.device | str | dict[str, str] | None
#: A module's parameters, as ``optimizer(params)`` takes them.
_PARAMETERS = Iterator[torch.nn.Parameter]


@runtime_checkable
class _Stateful(Protocol):
    """Anything with ``state_dict()`` and ``load_state_dict(state)``: what checkpoints save and restore."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


@runtime_checkable
class Steppable(Protocol):
    """Anything with ``step()``: an optimizer or a scheduler."""

    def step(self, *args: Any, **kwargs: Any) -> Any: ...


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


__all__ = ["EVAL_DATALOADERS", "LRScheduler", "LRSchedulerConfig", "LRSchedulerConfigType", "LRSchedulerPLType",
           "LRSchedulerTypeUnion", "OptimizerLRScheduler", "OptimizerLRSchedulerConfig", "STEP_OUTPUT", "Steppable",
           "TRAIN_DATALOADERS"]
