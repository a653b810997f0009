"""Staging: a copy of a checkpoint's tensors on the host, taken before training changes them again.

A checkpoint written in the background must hold the state of the moment it was saved, while
the next optimizer step already changes the parameters in place. So every tensor is copied to
host memory first (from a GPU into pinned memory, all copies in flight at once, one wait at
the end). The copies are kept for the next save, which copies into them again instead of
allocating (and touching) a checkpoint's worth of fresh memory each time.

Example::

    stager = Stager()
    with stager.staging():
        snapshot = stager.stage({"weight": model.weight, "step": 3})   # safe to change model.weight now
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from framework.nested import map_tensors


class Stager:
    """Copies nested checkpoint dicts' tensors to the host, reusing the buffers of the previous staging.

    Tensors that are the same memory (a tied weight, or one state saved twice at one save
    point) are copied once and shared by every place that holds them.
    """

    def __init__(self) -> None:
        self._buffers: list[torch.Tensor] = []
        self._position = 0
        # (source, copy) by the source's memory; the source is held so its address is not reused meanwhile
        self._copies: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self._devices_to_wait_for: set[torch.device] = set()

    @contextlib.contextmanager
    def staging(self) -> Iterator[None]:
        """One save point: ``stage`` calls inside it may share copies; on leaving, every copy is complete.

        The buffers are reused at the next ``staging``: what was staged before must not be
        read any more by then.
        """
        self._position = 0
        try:
            with torch.no_grad():
                yield
        finally:
            for device in self._devices_to_wait_for:
                torch.cuda.current_stream(device).synchronize()
            self._devices_to_wait_for.clear()
            self._copies.clear()

    def stage(self, value: Any) -> Any:
        """``value`` rebuilt with a host copy in place of each tensor in it (inside ``staging``)."""
        return map_tensors(value, self._copy)

    def release(self) -> None:
        """Free the kept buffers (the next staging allocates afresh)."""
        self._buffers.clear()

    def _copy(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.detach()
        identity = _memory_identity(tensor)
        if identity in self._copies:
            return self._copies[identity][1]
        buffer = self._buffers[self._position] if self._position < len(self._buffers) else None
        if buffer is not None and _fits(buffer, tensor):
            buffer.copy_(tensor, non_blocking=_local(tensor).is_cuda)
        else:
            buffer = _new_host_copy(tensor)
            if self._position < len(self._buffers):
                self._buffers[self._position] = buffer
            else:
                self._buffers.append(buffer)
        if _local(tensor).is_cuda:
            self._devices_to_wait_for.add(_local(tensor).device)
        self._position += 1
        self._copies[identity] = (tensor, buffer)
        return buffer

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_buffers": [], "_copies": {}, "_devices_to_wait_for": set()}


def _is_dtensor(tensor: torch.Tensor) -> bool:
    return type(tensor).__name__ == "DTensor"  # without importing torch.distributed where it is not used


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor holding this process's numbers: a DTensor's local part, else the tensor itself."""
    return tensor._local_tensor if _is_dtensor(tensor) else tensor


def _memory_identity(tensor: torch.Tensor) -> tuple:
    local = _local(tensor)
    placements = tuple(tensor.placements) if _is_dtensor(tensor) else ()
    return (local.device, local.data_ptr(), local.dtype, tuple(local.shape), tuple(local.stride()),
            local.storage_offset(), tuple(tensor.shape), placements)


def _fits(buffer: torch.Tensor, tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` can be copied into ``buffer`` as it is laid out."""
    if type(buffer) is not type(tensor) or buffer.dtype != tensor.dtype or buffer.shape != tensor.shape:
        return False
    if _is_dtensor(tensor):  # a part on the host: DTensor copies part to part only between like layouts
        return (not _local(tensor).is_cuda and buffer.placements == tensor.placements
                and buffer.device_mesh == tensor.device_mesh and _local(buffer).shape == _local(tensor).shape)
    return buffer.stride() == tensor.stride() and (not tensor.is_cuda or buffer.is_pinned())


def _new_host_copy(tensor: torch.Tensor) -> torch.Tensor:
    if _is_dtensor(tensor):
        return tensor.to("cpu", copy=True)
    if tensor.is_cuda:  # pinned, so the copy is a DMA that overlaps the others (pinning costs once: kept)
        buffer = torch.empty_like(tensor, device="cpu", pin_memory=True)
        return buffer.copy_(tensor, non_blocking=True)
    return tensor.clone()
