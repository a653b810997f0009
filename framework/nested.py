"""Applying a function to every tensor inside a nested batch (dicts, lists, tuples, dataclasses), and moving
a batch to a device that way."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import torch


def map_tensors(data: Any, fn: Callable[[torch.Tensor], Any], other: Callable[[Any], Any] | None = None) -> Any:
    """``data`` rebuilt with ``fn(tensor)`` in place of every tensor in it.

    Walks dicts (any Mapping that can be rebuilt from its items, defaultdicts too), lists,
    tuples, namedtuples and dataclasses; anything else goes through ``other`` when given,
    and is returned unchanged otherwise.

    Example::

        map_tensors({"x": torch.ones(2), "ids": [torch.zeros(1)]}, lambda t: t * 2)
    """
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, (list, tuple)):
        mapped = [fn(item) if type(item) is torch.Tensor else map_tensors(item, fn, other) for item in data]
        if type(data) is tuple or type(data) is list:
            return type(data)(mapped)
        if isinstance(data, tuple) and hasattr(data, "_fields"):  # a namedtuple
            return type(data)(*mapped)
        try:
            return type(data)(mapped)
        except TypeError:  # a list/tuple subclass that cannot be built from one iterable
            return mapped
    if isinstance(data, Mapping):
        items = {key: map_tensors(value, fn, other) for key, value in data.items()}
        if isinstance(data, defaultdict):
            return type(data)(data.default_factory, items)
        try:
            return type(data)(items)
        except TypeError:
            return items
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return _map_dataclass(data, fn, other)
    return other(data) if other is not None else data


def _map_dataclass(data: Any, fn: Callable[[torch.Tensor], Any], other: Callable[[Any], Any] | None) -> Any:
    fields = dataclasses.fields(data)
    changes = {f.name: map_tensors(getattr(data, f.name), fn, other) for f in fields if f.init}
    mapped = dataclasses.replace(data, **changes)
    for f in fields:
        if not f.init:
            # object.__setattr__ also works on frozen dataclasses.
            object.__setattr__(mapped, f.name, map_tensors(getattr(data, f.name), fn, other))
    return mapped


def extract_batch_size(batch: Any) -> int:
    """The length of the first tensor found in ``batch`` (1 when there is none)."""
    stack = [batch]
    while stack:
        item = stack.pop(0)
        if isinstance(item, torch.Tensor):
            return int(item.shape[0]) if item.ndim > 0 else 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif hasattr(item, "__dataclass_fields__"):
            stack.extend(getattr(item, name) for name in item.__dataclass_fields__)
    return 1


def move_to_device(batch: Any, device: torch.device) -> Any:
    """``batch`` with every tensor in it on ``device``.

    Handles tensors, dicts (any Mapping that can be rebuilt from its items), lists,
    tuples, namedtuples, dataclasses and any object with a ``.to(device)`` method;
    everything else is returned unchanged.

    Example::

        move_to_device({"x": torch.ones(2), "meta": ["a", "b"]}, torch.device("cpu"))
    """
    non_blocking = device.type == "cuda"

    def move(tensor: torch.Tensor) -> torch.Tensor:
        # Comparing devices is cheaper than a no-op ``.to()`` through the dispatcher (CPU training).
        return tensor if tensor.device == device else tensor.to(device, non_blocking=non_blocking)

    def move_other(obj: Any) -> Any:
        to = getattr(obj, "to", None)
        return to(device) if callable(to) else obj

    return map_tensors(batch, move, move_other)
