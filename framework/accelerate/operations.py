"""Accelerate's collectives over nested data (``gather``, ``reduce``, ``pad_across_processes``,
``gather_for_metrics``), built on the strategy's all-gather and all-reduce."""

from __future__ import annotations

from typing import Any

import torch

from framework.errors import MisconfigurationError, describe
from framework.nested import map_tensors

_REDUCTIONS = ("sum", "mean", "max", "min", "none")


def gather(strategy: Any, data: Any) -> Any:
    """Each tensor in ``data`` from every rank, joined along the first dimension (a 0-dim tensor becomes one of
    ``num_processes`` elements); on one process ``data`` as it is."""
    _tensors_only(data, "gather")
    if strategy.world_size == 1:
        return data
    return map_tensors(data, lambda tensor: _joined(strategy.all_gather(tensor.unsqueeze(0) if tensor.dim() == 0
                                                                         else tensor)))


def gather_sized(strategy: Any, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` from every rank joined along the first dimension, whose size may differ between ranks."""
    if tensor.dim() == 0:
        tensor = tensor.unsqueeze(0)
    sizes = strategy.all_gather(torch.tensor([tensor.shape[0]], device=tensor.device)).flatten().tolist()
    padded = pad_to(tensor, max(sizes), 0, 0, pad_first=False)
    parts = strategy.all_gather(padded)
    return torch.cat([part[:size] for part, size in zip(parts, sizes, strict=False)])


def gather_for_metrics(strategy: Any, data: Any, remainder: int, at_end: bool, as_objects: bool) -> Any:
    """``data`` from every rank, cut at the end of a pass to the ``remainder`` samples its last round really holds
    (0: a complete round, nothing to cut; -1: unknown). One process cuts too, as Accelerate does: a per-sample
    value made as long as a full batch (``loss.repeat(batch_size)``) comes back as long as the short last batch.
    Tensors are joined; anything else is gathered as objects (a list joined from each rank's list)."""
    objects = as_objects or not _all_tensors(data)
    if strategy.world_size > 1 and objects:
        gathered = strategy.all_gather_object(data)
        data = [item for part in gathered for item in (part if isinstance(part, list) else [part])]
    elif strategy.world_size > 1:
        data = map_tensors(data, lambda tensor: gather_sized(strategy, tensor))
    if not at_end or remainder <= 0:
        return data
    if objects:
        return data[:remainder] if isinstance(data, (list, tuple)) else data
    return map_tensors(data, lambda tensor: tensor[:remainder] if tensor.dim() else tensor)


def reduce(strategy: Any, data: Any, reduction: str = "sum") -> Any:
    """Each tensor in ``data`` reduced over the ranks (``"sum"``, ``"mean"``, ``"max"``, ``"min"``, ``"none"``);
    new tensors, also on one process."""
    if reduction not in _REDUCTIONS:
        raise MisconfigurationError(f"reduce(reduction={describe(reduction)}): accepted {', '.join(_REDUCTIONS)}.")
    _tensors_only(data, "reduce")
    if reduction == "none" or strategy.world_size == 1:
        return map_tensors(data, torch.clone)
    return map_tensors(data, lambda tensor: strategy.all_reduce(tensor, reduction))


def pad_across_processes(strategy: Any, data: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False) -> Any:
    """Each tensor in ``data`` padded with ``pad_index`` along ``dim`` to the largest size any rank has there, so
    they can be gathered; at the start with ``pad_first``."""
    def pad(tensor: torch.Tensor) -> torch.Tensor:
        if strategy.world_size == 1 or dim >= tensor.dim() or dim < -tensor.dim():
            return tensor
        size = torch.tensor([tensor.shape[dim]], device=tensor.device)
        largest = int(strategy.all_gather(size).max())
        return pad_to(tensor, largest, dim, pad_index, pad_first)

    return map_tensors(data, pad)


def pad_to(tensor: torch.Tensor, size: int, dim: int, pad_index: Any, pad_first: bool) -> torch.Tensor:
    """``tensor`` grown to ``size`` along ``dim`` with ``pad_index`` values (before it with ``pad_first``)."""
    missing = size - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    filler = tensor.new_full(shape, pad_index)
    return torch.cat([filler, tensor] if pad_first else [tensor, filler], dim=dim)


def _joined(stacked: torch.Tensor) -> torch.Tensor:
    return stacked.reshape(-1, *stacked.shape[2:])


def _all_tensors(data: Any) -> bool:
    found = []
    map_tensors(data, lambda tensor: tensor, other=lambda value: found.append(value))
    return not found


def _tensors_only(data: Any, name: str) -> None:
    if not _all_tensors(data):
        raise TypeError(f"accelerator.{name}() takes tensors (in lists, tuples and dicts at any depth), got "
                        f"{describe(data)}. For other objects use accelerator.gather_for_metrics(..., "
                        "use_gather_object=True).")
