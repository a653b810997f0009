"""Accelerate's free functions on nested data (tensors in lists, tuples, dicts at any depth): collectives over the
processes of this run (``gather``, ``reduce``, ``broadcast`` ...), moving to a device, and fp32 conversion. They
work on the newest Accelerator's processes (one process before any exists and outside a launcher)."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch

from framework.accelerate import operations as on_strategy
from framework.accelerate.utils.shared_state import current_runtime
from framework.accelerate.weights import write_weights
from framework.errors import MisconfigurationError, describe
from framework.io.checkpoint_storage import save_checkpoint
from framework.nested import map_tensors


def is_torch_tensor(value: Any) -> bool:
    """Whether ``value`` is a tensor."""
    return isinstance(value, torch.Tensor)


def recursively_apply(func: Callable[..., Any], data: Any, *args: Any,
                      test_type: Callable[[Any], bool] = is_torch_tensor, error_on_other_type: bool = False,
                      **kwargs: Any) -> Any:
    """``data`` rebuilt with ``func(item, *args, **kwargs)`` for each item ``test_type`` accepts; other items stay
    as they are, or raise ``TypeError`` with ``error_on_other_type``.

    :raises TypeError: with ``error_on_other_type``, where an item is not a list, tuple or dict and ``test_type``
        refuses it.
    """
    if isinstance(data, (list, tuple)):
        items = [recursively_apply(func, item, *args, test_type=test_type, error_on_other_type=error_on_other_type,
                                   **kwargs) for item in data]
        return type(data)(*items) if hasattr(data, "_fields") else type(data)(items)
    if isinstance(data, Mapping):
        return type(data)({key: recursively_apply(func, value, *args, test_type=test_type,
                                                  error_on_other_type=error_on_other_type, **kwargs)
                           for key, value in data.items()})
    if test_type(data):
        return func(data, *args, **kwargs)
    if error_on_other_type:
        raise TypeError(f"recursively_apply({getattr(func, '__name__', func)}) reached {describe(data)}; it takes "
                        "nested lists, tuples and dicts of objects that test_type accepts.")
    return data


def send_to_device(tensor: Any, device: Any, non_blocking: bool = False, skip_keys: list[str] | str | None = None
                   ) -> Any:
    """Each tensor in ``tensor`` moved to ``device`` (dict entries named in ``skip_keys`` stay where they are)."""
    skip = {skip_keys} if isinstance(skip_keys, str) else set(skip_keys or ())
    if isinstance(tensor, Mapping) and skip:
        return type(tensor)({key: value if key in skip else send_to_device(value, device, non_blocking)
                             for key, value in tensor.items()})
    return map_tensors(tensor, lambda item: item.to(device, non_blocking=non_blocking))


def listify(data: Any) -> Any:
    """``data`` with each tensor turned into Python lists and numbers."""
    return map_tensors(data, lambda item: item.tolist())


def slice_tensors(data: Any, tensor_slice: slice, process_index: int | None = None, num_processes: int | None = None
                  ) -> Any:
    """Each tensor in ``data`` indexed with ``tensor_slice``."""
    return map_tensors(data, lambda item: item[tensor_slice])


def concatenate(data: list[Any], dim: int = 0) -> Any:
    """A list of nested structures of equal layout joined into one, each tensor concatenated along ``dim``.

    :raises TypeError: where the items hold something other than lists, tuples, dicts and tensors.
    """
    first = data[0]
    if isinstance(first, (list, tuple)):
        joined = [concatenate([item[index] for item in data], dim=dim) for index in range(len(first))]
        return type(first)(*joined) if hasattr(first, "_fields") else type(first)(joined)
    if isinstance(first, Mapping):
        return type(first)({key: concatenate([item[key] for item in data], dim=dim) for key in first})
    if not isinstance(first, torch.Tensor):
        raise TypeError(f"concatenate() takes nested lists, tuples and dicts of tensors, got {describe(first)}.")
    return torch.cat(data, dim=dim)


def gather(tensor: Any) -> Any:
    """Each tensor in ``tensor`` from every process, joined along the first dimension (a 0-dim tensor becomes one
    of ``num_processes`` elements); on one process as it is."""
    return on_strategy.gather(current_runtime().strategy, tensor)


def gather_object(object: Any) -> list[Any]:
    """Every process's ``object`` (a list's items joined) in process order; on one process ``object`` itself."""
    strategy = current_runtime().strategy
    if strategy.world_size == 1:
        return object
    gathered = strategy.all_gather_object(object)
    return [item for part in gathered for item in (part if isinstance(part, list) else [part])]


def reduce(tensor: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """Each tensor in ``tensor`` reduced over the processes (``"mean"``, ``"sum"``, ``"max"``, ``"min"`` or
    ``"none"``) and multiplied by ``scale``; new tensors."""
    reduced = on_strategy.reduce(current_runtime().strategy, tensor, reduction)
    return reduced if scale == 1.0 else map_tensors(reduced, lambda item: item * scale)


def broadcast(tensor: Any, from_process: int = 0) -> Any:
    """Each tensor in ``tensor`` as process ``from_process`` has it, on every process."""
    runtime = current_runtime()
    return runtime.broadcast(tensor, src=from_process)


def broadcast_object_list(object_list: list[Any], from_process: int = 0) -> list[Any]:
    """Fill ``object_list`` in place with process ``from_process``'s items (any picklable objects); returns it."""
    object_list[:] = current_runtime().broadcast(list(object_list), src=from_process)
    return object_list


def pad_across_processes(tensor: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False) -> Any:
    """Each tensor in ``tensor`` padded with ``pad_index`` along ``dim`` to the largest size any process has."""
    return on_strategy.pad_across_processes(current_runtime().strategy, tensor, dim, pad_index, pad_first)


def convert_to_fp32(tensor: Any) -> Any:
    """Each fp16 or bf16 tensor in ``tensor`` as float32; others unchanged."""
    return map_tensors(tensor, lambda item: item.float() if item.dtype in (torch.float16, torch.bfloat16) else item)


def convert_outputs_to_fp32(model_forward: Callable[..., Any]) -> Callable[..., Any]:
    """``model_forward`` returning its half-precision tensors as float32."""

    @functools.wraps(model_forward)
    def forward(*args: Any, **kwargs: Any) -> Any:
        return convert_to_fp32(model_forward(*args, **kwargs))

    return forward


def get_mixed_precision_context_manager(native_amp: bool = False, autocast_kwargs: Any = None) -> Any:
    """Autocast in this run's mixed precision when ``native_amp`` (and the handler leaves it enabled), else a
    context that does nothing."""
    if not native_amp or (autocast_kwargs is not None and not autocast_kwargs.enabled):
        return contextlib.nullcontext()
    return current_runtime().autocast()


def get_grad_scaler(distributed_type: Any = None, **kwargs: Any) -> torch.amp.GradScaler:
    """A ``torch.amp.GradScaler`` for this run's device, with ``kwargs`` (``GradScalerKwargs``' fields)."""
    return torch.amp.GradScaler(current_runtime().device.type, **kwargs)


def wait_for_everyone() -> None:
    """Wait until every process gets here (a barrier)."""
    current_runtime().barrier("wait_for_everyone")


def save(obj: Any, f: str | os.PathLike, save_on_each_node: bool = False, safe_serialization: bool = False) -> None:
    """``torch.save(obj, f)`` on the main process (each machine's first with ``save_on_each_node``), written
    atomically; a dict of tensors as safetensors with ``safe_serialization``."""
    runtime = current_runtime()
    if (runtime.local_rank if save_on_each_node else runtime.global_rank) == 0:
        if safe_serialization:
            write_weights(obj, os.fspath(f), as_safetensors=True)
        else:
            save_checkpoint(obj, f)


def load(f: str | os.PathLike, map_location: Any = None, **kwargs: Any) -> Any:
    """What ``save`` wrote (read with ``weights_only=True`` unless ``weights_only=False`` is passed).

    :raises MisconfigurationError: where a keyword other than ``map_location`` and ``weights_only`` is given.
    """
    weights_only = kwargs.pop("weights_only", True)
    if kwargs:
        raise MisconfigurationError(f"load({os.fspath(f)!r}): unknown arguments {sorted(kwargs)}; accepted "
                                    "map_location and weights_only.")
    return torch.load(f, map_location=map_location, weights_only=weights_only)
