"""Moves a batch of any nesting to a device."""

from __future__ import annotations

from typing import Any

import torch

from framework.nested import map_tensors


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
