"""The bytes of training state one rank holds under DeepSpeed's ZeRO engine, counted in DeepSpeed's own buffers.

``framework.testing.state_bytes`` counts what a module exposes (``param.data``, ``param.grad``) and the
optimizer's ``state``. Under DeepSpeed that misses most of it: ZeRO-3 leaves each parameter's ``data`` empty
outside its forward and backward and keeps the rank's part in ``param.ds_tensor``; stages 2 and 3 never leave
gradients in ``param.grad`` (they go to the ZeRO optimizer's own buffers); and the fp32 master copy the
optimizer steps is a tensor of its own. ``deepspeed_state_bytes`` reads those buffers (DeepSpeed 0.19's names),
each storage once (views of one flat buffer count as that buffer, padding included):

- ``parameters``: the storages of every ``param.data`` (ZeRO-1/2: views of ``bit16_groups_flat``, the whole
  model; ZeRO-3: the parameters gathered at the moment, i.e. those under ``stage3_param_persistence_threshold``
  elements after a forward pass) and of every ``param.ds_tensor`` (ZeRO-3: views of ``lp_param_buffer``, this
  rank's partition).
- ``gradients``: ``param.grad`` where set, the reduced partition DeepSpeed keeps for the step
  (``averaged_gradients``: ZeRO-2 views of ``grads_in_partition``; ZeRO-3 views of
  ``grad_partitions_flat_buffer``, which is allocated for the whole run and is counted at every point), and the
  master partition's ``.grad`` (set inside the step, or for the whole run under optimizer offload). Not
  counted: the reduction bucket (``ipg_buckets``), which ``gradient_bucket_bytes`` reports.
- ``optimizer``: the fp32 master partition (ZeRO-1/2 ``single_partition_of_fp32_groups``, ZeRO-3
  ``fp32_partitioned_groups_flat``) and the tensors in the wrapped optimizer's ``state`` (AdamW's moments and
  step counts), a storage already counted as parameters not again. DeepSpeed 0.19.8 keeps the master partition
  as a copy even in fp32 training: ZeRO-1/2 always clone it (``stage_1_and_2.py``, "A partition of the fp32
  master weights"); ZeRO-3 means to reuse the fp32 partition in place when it is on the optimizer's device, but
  compares a ``torch.device`` with the device's name as a string (``stage3.py``, ``_create_fp32_partitions``),
  which is never equal, so it copies too. Hence 12Ψ/N (ZeRO paper's K = 12: master weights, two moments), not
  the 8Ψ/N of a torch optimizer stepping the parameters themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn


def deepspeed_state_bytes(module: nn.Module, zero_optimizer: Any) -> dict[str, int]:
    """The bytes of ``parameters``, ``gradients`` and ``optimizer`` state this rank holds now, each storage counted
    once across the three (``zero_optimizer``: the engine's ``optimizer``, DeepSpeed's ZeRO optimizer)."""
    seen: set[int] = set()
    parameters = list(module.parameters())
    return {"parameters": _unique_bytes(_parameter_tensors(parameters), seen),
            "gradients": _unique_bytes(_gradient_tensors(parameters, zero_optimizer), seen),
            "optimizer": _unique_bytes(_optimizer_tensors(zero_optimizer), seen)}


def gradient_bucket_bytes(zero_optimizer: Any) -> int:
    """The bytes allocated now for DeepSpeed's gradient reduction buckets (``ipg_buckets``): ZeRO-3 allocates one
    of ``reduce_bucket_size`` elements per gradient dtype for the whole run; ZeRO-1/2 allocate it in backward
    and free it at backward's end. Allocated, not necessarily written: on CPU only the pages written are
    resident."""
    buckets = getattr(zero_optimizer, "ipg_buckets", {}) or {}
    return _unique_bytes(_tensors_in([bucket.buffer for bucket in buckets.values()]), set())


def _parameter_tensors(parameters: list[nn.Parameter]) -> Iterator[torch.Tensor]:
    for parameter in parameters:
        yield parameter.data
        if getattr(parameter, "ds_tensor", None) is not None:
            yield parameter.ds_tensor


def _gradient_tensors(parameters: list[nn.Parameter], zero_optimizer: Any) -> Iterator[torch.Tensor]:
    yield from (parameter.grad for parameter in parameters if parameter.grad is not None)
    yield from _tensors_in(getattr(zero_optimizer, "averaged_gradients", None))
    yield from _tensors_in(getattr(zero_optimizer, "grad_partitions_flat_buffer", None))
    yield from (master.grad for master in _master_partitions(zero_optimizer) if master.grad is not None)


def _optimizer_tensors(zero_optimizer: Any) -> Iterator[torch.Tensor]:
    yield from _master_partitions(zero_optimizer)
    yield from _tensors_in(list(zero_optimizer.optimizer.state.values()))


def _master_partitions(zero_optimizer: Any) -> list[torch.Tensor]:
    for name in ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat"):  # ZeRO-1/2, ZeRO-3
        if getattr(zero_optimizer, name, None):
            return list(getattr(zero_optimizer, name))
    return []


def _tensors_in(value: Any) -> Iterator[torch.Tensor]:
    """The tensors in a tensor, or in lists, tuples and dicts' values of them, nested."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        yield from _tensors_in(list(value.values()))
    elif isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        for item in value:
            yield from _tensors_in(item)


def _unique_bytes(tensors: Iterable[torch.Tensor], seen: set[int]) -> int:
    """The bytes of the storages behind ``tensors`` not in ``seen`` (each once; ``seen`` then holds them)."""
    total = 0
    for tensor in tensors:
        storage = tensor.untyped_storage()
        if storage.nbytes() == 0 or storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total
