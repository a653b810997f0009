"""Step methods and batch hooks are called with the arguments their signatures take, as in Lightning.

``def training_step(self, batch)`` gets no ``batch_idx``; with several evaluation loaders,
``dataloader_idx`` is required, and with one it must have a default. Decided once per run.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from framework.errors import MisconfigurationError

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def accepts(fn: Callable[..., Any], name: str, min_args: int | None = None) -> bool:
    """Whether ``fn`` takes an argument ``name`` (by name, through ``*args``, or as its ``min_args``-th)."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin or C callable: assume it takes everything
        return True
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return True
    positional = [p for p in parameters if p.kind in _POSITIONAL]
    return any(p.name == name for p in positional) or (min_args is not None and len(positional) >= min_args)


def without_unaccepted_batch_idx(call: Callable[..., Any], method: Callable[..., Any]) -> Callable[..., Any]:
    """``call(batch, batch_idx, *extra)``, dropping ``batch_idx`` when ``method`` does not take it."""
    if accepts(method, "batch_idx", min_args=2):
        return call
    return lambda batch, batch_idx, *extra: call(batch, *extra)


def check_dataloader_idx(method: Callable[..., Any], owner: str, name: str, stage: str, several: bool) -> None:
    """Several ``stage`` loaders need ``dataloader_idx`` in ``owner.name``; one loader needs it optional."""
    if several and not accepts(method, "dataloader_idx"):
        raise MisconfigurationError(
            f"There are several {stage} dataloaders, but {owner}.{name}() has no dataloader_idx argument to tell "
            "them apart. Add dataloader_idx=0 to its signature."
        )
    if not several:
        try:
            parameter = inspect.signature(method).parameters.get("dataloader_idx")
        except (TypeError, ValueError):
            return
        if parameter is not None and parameter.default is inspect.Parameter.empty:
            raise MisconfigurationError(
                f"There is one {stage} dataloader, but {owner}.{name}() requires a dataloader_idx argument. "
                "Give it a default (dataloader_idx=0) or remove it."
            )
