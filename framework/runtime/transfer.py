"""Moves a batch of any nesting to a device."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import torch


def move_to_device(batch: Any, device: torch.device) -> Any:
    """``batch`` with every tensor in it on ``device``.

    Handles tensors, dicts (any Mapping that can be rebuilt from its items), lists,
    tuples, namedtuples, dataclasses and any object with a ``.to(device)`` method;
    everything else is returned unchanged.

    Example::

        move_to_device({"x": torch.ones(2), "meta": ["a", "b"]}, torch.device("cpu"))
    """
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=device.type == "cuda")
    if isinstance(batch, (list, tuple)):
        # A batch is most often a tuple of tensors already on the device (CPU training):
        # comparing devices is cheaper than a no-op ``.to()`` through the dispatcher.
        moved = [
            item if type(item) is torch.Tensor and item.device == device else move_to_device(item, device)
            for item in batch
        ]
        if type(batch) is tuple or type(batch) is list:
            return type(batch)(moved)
        if isinstance(batch, tuple) and hasattr(batch, "_fields"):
            return type(batch)(*moved)
        try:
            return type(batch)(moved)
        except TypeError:  # a list/tuple subclass that cannot be built from one iterable
            return moved
    if isinstance(batch, Mapping):
        items = {key: move_to_device(value, device) for key, value in batch.items()}
        if isinstance(batch, defaultdict):
            return type(batch)(batch.default_factory, items)
        try:
            return type(batch)(items)
        except TypeError:
            return items
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return _move_dataclass(batch, device)
    to = getattr(batch, "to", None)
    if callable(to):
        return to(device)
    return batch


def _move_dataclass(batch: Any, device: torch.device) -> Any:
    changes = {f.name: move_to_device(getattr(batch, f.name), device) for f in dataclasses.fields(batch) if f.init}
    moved = dataclasses.replace(batch, **changes)
    for f in dataclasses.fields(batch):
        if not f.init:
            # object.__setattr__ also works on frozen dataclasses.
            object.__setattr__(moved, f.name, move_to_device(getattr(batch, f.name), device))
    return moved
