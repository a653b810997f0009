"""Models as objects to take apart, measure and fill: the user's model behind its wrappers, its size per
submodule, and weights read from files into it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from framework.accelerate.weights import read_saved_model, read_weights_file
from framework.errors import MisconfigurationError, describe
from framework.runtime.wrappers import original_module


def extract_model_from_parallel(model: nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True,
                                recursive: bool = False) -> nn.Module:
    """The user's model inside the wrappers ``prepare`` (or the user) put around it: DDP's, FSDP's, the framework's;
    inside a ``torch.compile`` wrapper unless ``keep_torch_compile=False``."""
    model = original_module(model)
    while isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
        model = model.module
    if not keep_torch_compile and hasattr(model, "_orig_mod"):
        model = model._orig_mod
    return model


def _dtype_size(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).bits / 8 if dtype.is_floating_point else torch.iinfo(dtype).bits / 8


def compute_module_sizes(model: nn.Module, dtype: str | torch.dtype | None = None,
                         special_dtypes: dict[str, str | torch.dtype] | None = None, buffers_only: bool = False
                         ) -> dict[str, int]:
    """Bytes held by each submodule (keyed by its dotted name, ``""`` for the whole model), its parameters and
    buffers counted in ``dtype`` when given (or ``special_dtypes[name]``), else in their own dtypes."""
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    special = {name: getattr(torch, value) if isinstance(value, str) else value
               for name, value in (special_dtypes or {}).items()}
    tensors = list(model.named_buffers()) if buffers_only else [*model.named_parameters(), *model.named_buffers()]
    sizes: dict[str, int] = {}
    for name, tensor in tensors:
        wanted = special.get(name, dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype)
        size = int(tensor.numel() * _dtype_size(wanted))
        parts = name.split(".")
        for depth in range(len(parts) + 1):
            prefix = ".".join(parts[:depth])
            sizes[prefix] = sizes.get(prefix, 0) + size
    return sizes


def get_max_layer_size(modules: list[tuple[str, nn.Module]], module_sizes: dict[str, int],
                       no_split_module_classes: list[str]) -> tuple[int, list[str]]:
    """The size of the largest layer among ``modules`` (a module of a class in ``no_split_module_classes``, or one
    without children, counts as one layer) and the names of the layers of that size."""
    largest, names = 0, []
    queue = list(modules)
    while queue:
        name, module = queue.pop(0)
        children = list(module.named_children())
        if children and type(module).__name__ not in no_split_module_classes:
            queue = [(f"{name}.{child}" if name else child, value) for child, value in children] + queue
            continue
        size = module_sizes.get(name, 0)
        if size > largest:
            largest, names = size, [name]
        elif size == largest:
            names.append(name)
    return largest, names


def calculate_maximum_sizes(model: nn.Module) -> tuple[int, tuple[int, list[str]]]:
    """The model's total size in bytes, and its largest layer's size with that layer's names."""
    sizes = compute_module_sizes(model)
    no_split = list(getattr(model, "_no_split_modules", None) or [])
    return sizes[""], get_max_layer_size(list(model.named_children()), sizes, no_split)


def load_state_dict(checkpoint_file: str | os.PathLike, device_map: Any = None) -> dict[str, torch.Tensor]:
    """The state dict in one weights file (safetensors, or read with ``weights_only=True``), on the CPU.

    :raises MisconfigurationError: where ``device_map`` is given.
    """
    if device_map is not None:
        raise MisconfigurationError(f"load_state_dict(device_map={describe(device_map)}): device maps are not "
                                    "supported; load on the CPU and move the model.")
    return read_weights_file(os.fspath(checkpoint_file))


def load_checkpoint_in_model(model: nn.Module, checkpoint: str | os.PathLike, device_map: Any = None,
                             offload_folder: Any = None, dtype: str | torch.dtype | None = None,
                             offload_state_dict: bool = False, offload_buffers: bool = False,
                             keep_in_fp32_modules: list[str] | None = None, offload_8bit_bnb: bool = False,
                             strict: bool = False, full_state_dict: bool = True, broadcast_from_rank0: bool = False
                             ) -> None:
    """Load the weights in ``checkpoint`` (a weights file, a shards' ``.index.json``, or a folder holding either)
    into ``model`` (one built with ``init_empty_weights`` too), cast to ``dtype`` when given (submodules named in
    ``keep_in_fp32_modules`` stay float32).

    :raises MisconfigurationError: where ``device_map`` or ``offload_folder`` is given.
    """
    if device_map is not None or offload_folder is not None:
        raise MisconfigurationError("load_checkpoint_in_model(device_map=..., offload_folder=...): placing a model on "
                                    "several devices or on disk is not supported; load it whole and move it.")
    state = read_saved_model(os.fspath(checkpoint))
    wanted = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if wanted is not None:
        keep = tuple(keep_in_fp32_modules or ())
        state = {key: value.to(torch.float32 if any(part in key for part in keep) else wanted)
                 if value.is_floating_point() else value for key, value in state.items()}
    model = extract_model_from_parallel(model)
    empty = any(tensor.is_meta for tensor in model.state_dict().values())
    model.load_state_dict(state, strict=strict, assign=empty or wanted is not None)  # new tensors: real or recast


def set_module_tensor_to_device(module: nn.Module, tensor_name: str, device: int | str | torch.device,
                                value: torch.Tensor | None = None, dtype: str | torch.dtype | None = None,
                                fp16_statistics: Any = None, tied_params_map: Any = None, non_blocking: bool = False,
                                clear_cache: bool = True) -> None:
    """Put the parameter or buffer ``tensor_name`` (dotted) of ``module`` on ``device``, replacing its values with
    ``value`` when given (a meta tensor gets real memory this way), cast to ``dtype`` when given.

    :raises ValueError: where ``tensor_name`` names no parameter or buffer of ``module``.
    """
    *path, name = tensor_name.split(".")
    owner = module.get_submodule(".".join(path)) if path else module
    if name not in owner._parameters and name not in owner._buffers:
        raise ValueError(f"set_module_tensor_to_device: {type(module).__name__} has no parameter or buffer "
                         f"{tensor_name!r}.")
    old = getattr(owner, name)
    new = (value if value is not None else old).to(device, non_blocking=non_blocking)
    wanted = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if wanted is not None:
        new = new.to(wanted)
    elif value is not None and old.is_floating_point() and old.device.type != "meta":
        new = new.to(old.dtype)
    if name in owner._parameters:
        owner._parameters[name] = nn.Parameter(new, requires_grad=old.requires_grad)
    else:
        owner._buffers[name] = new


def retie_parameters(model: nn.Module, tied_params: list[list[str]]) -> None:
    """Make each group of dotted parameter names in ``tied_params`` one parameter again (the first one's)."""
    for group in tied_params:
        shared = model.get_parameter(group[0])
        for name in group[1:]:
            *path, attribute = name.split(".")
            setattr(model.get_submodule(".".join(path)) if path else model, attribute, shared)


def get_module_children_bottom_up(model: nn.Module, return_fqns: bool = False) -> list[Any]:
    """Every submodule, children before their parents (``model`` last); ``(name, module)`` with ``return_fqns``."""
    ordered = list(reversed(list(model.named_modules())))
    return [(name, module) for name, module in ordered] if return_fqns else [module for _, module in ordered]


def has_offloaded_params(module: nn.Module) -> bool:
    """False: the framework never offloads a module's parameters behind hooks."""
    return False


@contextlib.contextmanager
def align_module_device(module: nn.Module, execution_device: torch.device | None = None) -> Iterator[None]:
    """Run the block with ``module``'s parameters on ``execution_device`` (when given), moved back after it."""
    if execution_device is None:
        yield
        return
    places = {name: parameter.device for name, parameter in module.named_parameters(recurse=False)}
    for name in places:
        set_module_tensor_to_device(module, name, execution_device)
    try:
        yield
    finally:
        for name, device in places.items():
            set_module_tensor_to_device(module, name, device)
