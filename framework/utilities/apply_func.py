"""Lightning's ``utilities.apply_func``: a function applied to every item of a type inside nested collections,
and a batch moved to a device.

``apply_to_collection`` and ``apply_to_collections`` hand over to lightning-utilities' own (installed with
torchmetrics), the functions Lightning re-exports here.

Example::

    apply_to_collection({"x": torch.ones(2), "n": 3}, torch.Tensor, lambda t: t * 2)   # {"x": tensor([2., 2.]), "n": 3}
    move_data_to_device(batch, "cuda:0")
"""

from __future__ import annotations

from typing import Any

import torch

from framework.nested import move_to_device

__all__ = ["apply_to_collection", "apply_to_collections", "convert_tensors_to_scalars", "move_data_to_device"]


def apply_to_collection(data: Any, dtype: type | tuple[type, ...], function: Any, *args: Any,
                        wrong_dtype: type | tuple[type, ...] | None = None, include_none: bool = True,
                        allow_frozen: bool = False, **kwargs: Any) -> Any:
    """``data`` with ``function(item, *args, **kwargs)`` in place of each item of type ``dtype`` (not of
    ``wrong_dtype``), inside dicts, lists, tuples, named tuples and dataclasses at any depth; ``include_none=False``
    drops the items it turned into None."""
    from lightning_utilities.core.apply_func import apply_to_collection as apply  # with packaging: not at import

    return apply(data, dtype, function, *args, wrong_dtype=wrong_dtype, include_none=include_none,
                 allow_frozen=allow_frozen, **kwargs)


def apply_to_collections(data1: Any, data2: Any, dtype: type | tuple[type, ...], function: Any, *args: Any,
                         wrong_dtype: type | tuple[type, ...] | None = None, **kwargs: Any) -> Any:
    """Two collections of the same shape walked together: ``function(item1, item2, *args, **kwargs)`` in place of
    each pair of items of type ``dtype``."""
    from lightning_utilities.core.apply_func import apply_to_collections as apply

    return apply(data1, data2, dtype, function, *args, wrong_dtype=wrong_dtype, **kwargs)


def move_data_to_device(batch: Any, device: torch.device | str | int) -> Any:
    """``batch`` with every tensor in it (in dicts, lists, tuples, dataclasses ...) on ``device``."""
    return move_to_device(batch, torch.device(device) if not isinstance(device, torch.device) else device)


def convert_tensors_to_scalars(data: Any) -> Any:
    """``data`` with every one-element tensor replaced by its Python number (a larger tensor is a ValueError)."""

    def to_item(value: torch.Tensor) -> Any:
        if value.numel() != 1:
            raise ValueError(f"convert_tensors_to_scalars: a tensor of {value.numel()} elements has no one number.")
        return value.item()

    return apply_to_collection(data, torch.Tensor, to_item)
