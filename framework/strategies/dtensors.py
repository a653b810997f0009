"""Tensors split over the ranks (DTensors): made whole, split like another, read from a checkpoint in the layout
they go to, or allocated for modules built on the meta device."""

from __future__ import annotations

import functools
import logging
import warnings
from typing import Any

import torch
from torch import nn


def read_in_layout(values: dict[Any, Any], layouts: dict[Any, Any]) -> dict[Any, Any]:
    """``values`` with each ``UnreadTensor`` read: into a DTensor laid out as ``layouts[key]`` where that is
    one of its shape (this rank reads its parts only), else whole. Every rank calls it, alike."""
    from torch.distributed.tensor import DTensor

    from framework.io.checkpoint_dir import UnreadTensor, read_unread

    targets: dict[Any, torch.Tensor] = {}
    for key, value in values.items():
        if isinstance(value, UnreadTensor):
            like = layouts.get(key)
            laid_out = isinstance(like, DTensor) and like.shape == value.size
            targets[value] = (torch.empty_like(like, dtype=value.dtype) if laid_out
                              else torch.empty(value.size, dtype=value.dtype))
    if not targets:
        return values
    read_unread(targets)
    return {key: targets[value] if isinstance(value, UnreadTensor) else value for key, value in values.items()}


def whole(value: Any) -> Any:
    """A DTensor gathered whole (a collective: every rank calls), anything else as it is."""
    from torch.distributed.tensor import DTensor

    if not isinstance(value, DTensor):
        return value
    quiet_redistribution_notes()
    return value.full_tensor()


@functools.cache
def quiet_redistribution_notes() -> None:
    """Drop torch's warning that a tensor on a 2-D mesh is reduced or gathered one dimension at a time."""
    # Gathering a tensor split over two mesh dimensions (tensor parallel x FSDP) takes one all-gather per dimension,
    # and torch logs a warning about it on every rank, for every such tensor, each time: nothing a user can act on.
    logging.getLogger("torch.distributed.tensor._redistribute").addFilter(
        lambda record: "sequential" not in record.getMessage())


def total_norm(tensors: list[torch.Tensor], norm_type: float) -> torch.Tensor:
    """The ``norm_type``-norm of all ``tensors`` together, each DTensor counted whole (a collective: every rank
    calls). DTensors are reduced per device mesh: tensor parallel layers and the layers only sharded
    for data parallelism live on different meshes, which one operation cannot mix."""
    quiet_redistribution_notes()  # the norms of a 2-D mesh's parts are reduced one dimension at a time
    norms = [whole(torch.nn.utils.get_total_norm(group, norm_type)) for group in by_mesh(tensors)]
    if len(norms) == 1:
        return norms[0]
    return torch.nn.utils.get_total_norm([norm.to(norms[0].device) for norm in norms], norm_type)


def clip_with_norm(parameters: list[torch.Tensor], max_norm: float, total: torch.Tensor) -> None:
    """Scale the gradients of ``parameters`` by ``max_norm / total`` where that is below 1, one mesh at a time."""
    for group in by_mesh(parameters):
        torch.nn.utils.clip_grads_with_norm_(group, max_norm, total)


def by_mesh(tensors: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """``tensors`` grouped by the device mesh of each DTensor (plain tensors together), in first-seen order."""
    from torch.distributed.tensor import DTensor

    groups: dict[Any, list[torch.Tensor]] = {}
    for tensor in tensors:
        groups.setdefault(tensor.device_mesh if isinstance(tensor, DTensor) else None, []).append(tensor)
    return list(groups.values())


def placed_like(value: Any, like: Any) -> Any:
    """``value`` laid out as ``like``: a whole tensor split as the DTensor ``like`` is (each rank keeps its own
    part, no communication), a DTensor made whole for a plain ``like``."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if not isinstance(value, torch.Tensor):
        return value
    if isinstance(like, DTensor) and not isinstance(value, DTensor):
        return distribute_tensor(value.to(like.device), like.device_mesh, like.placements, src_data_rank=None)
    if isinstance(value, DTensor) and not isinstance(like, DTensor):
        return value.full_tensor()
    return value


def same_shape(value: Any, parameter: torch.Tensor) -> bool:
    """Whether ``value`` is a tensor of ``parameter``'s (global) shape: optimizer state split as the parameter is."""
    return isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape == parameter.shape


def has_meta_tensors(module: nn.Module) -> bool:
    """Whether any parameter or buffer of ``module`` is on the meta device (built there, not yet allocated)."""
    return any(t.is_meta for t in (*module.parameters(), *module.buffers()))


def materialize(model: nn.Module, device: torch.device) -> None:
    """Allocate the (sharded) parameters created on the meta device and initialise them with each submodule's
    ``reset_parameters()``; warn about those left as allocated (no such method)."""
    model.to_empty(device=device)
    uninitialised = []
    with torch.no_grad(), warnings.catch_warnings():
        # initialising sharded CPU tensors works (each rank draws its own part; tested), despite torch's caution
        warnings.filterwarnings("ignore", message="DTensor random operators may not have complete support")
        for name, module in model.named_modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset) and module is not model:
                reset()
            elif holds_tensors_itself(module):
                uninitialised.append(name.removeprefix("module.") or type(module).__name__)
    if uninitialised:
        named = ", ".join(uninitialised[:8]) + (" ..." if len(uninitialised) > 8 else "")
        warnings.warn(
            "These modules were built on the meta device and hold parameters or buffers that nothing initialised "
            f"(they have no reset_parameters()): {named}. Their values are whatever the memory held. Give them a "
            "reset_parameters() method, or build them outside the meta device.", stacklevel=2,
        )


def holds_tensors_itself(module: nn.Module) -> bool:
    """Whether ``module`` has parameters or buffers of its own (not only its submodules')."""
    return any(True for _ in module.parameters(recurse=False)) or any(True for _ in module.buffers(recurse=False))
