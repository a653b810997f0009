"""Lightning's ``utilities.memory``: telling out-of-memory errors apart, and giving cached CUDA memory back.

Example::

    try:
        model(batch)
    except RuntimeError as error:
        if not is_oom_error(error):
            raise
        garbage_collection_cuda()
"""

from __future__ import annotations

import gc
from typing import Any

import torch

from framework.errors import is_out_of_memory
from framework.utilities.apply_func import apply_to_collection

__all__ = ["garbage_collection_cuda", "is_cuda_out_of_memory", "is_cudnn_snafu", "is_oom_error",
           "is_out_of_cpu_memory", "recursive_detach"]


def is_oom_error(exception: BaseException) -> bool:
    """Whether ``exception`` says a device or the host ran out of memory."""
    return is_out_of_memory(exception)


def is_cuda_out_of_memory(exception: BaseException) -> bool:
    """Whether ``exception`` is CUDA's out-of-memory error."""
    return isinstance(exception, torch.cuda.OutOfMemoryError) or (
        isinstance(exception, RuntimeError) and "CUDA" in str(exception) and "out of memory" in str(exception))


def is_cudnn_snafu(exception: BaseException) -> bool:
    """Whether ``exception`` is cuDNN's way of running out of memory."""
    return isinstance(exception, RuntimeError) and "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED" in str(exception)


def is_out_of_cpu_memory(exception: BaseException) -> bool:
    """Whether ``exception`` says the host ran out of memory."""
    return isinstance(exception, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(exception)


def garbage_collection_cuda() -> None:
    """Collect Python's garbage, then hand CUDA's cached, unused memory back (nothing without CUDA)."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def recursive_detach(in_dict: Any, to_cpu: bool = False) -> Any:
    """``in_dict`` with every tensor in it (at any depth) detached, and moved to the CPU with ``to_cpu``."""
    def detach(tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.detach()
        return tensor.cpu() if to_cpu else tensor

    return apply_to_collection(in_dict, torch.Tensor, detach)
