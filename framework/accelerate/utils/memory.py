"""Running with the largest batch that fits: ``find_executable_batch_size`` retries a function with a smaller
batch size each time it runs out of memory."""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable
from typing import Any

import torch

from framework.errors import is_out_of_memory


def clear_device_cache(garbage_collection: bool = False) -> None:
    """Release the memory the device's caching allocator holds (after a garbage collection, if asked)."""
    if garbage_collection:
        gc.collect()
    if torch.cuda.is_initialized():  # nothing is cached where CUDA never started (and a CPU run never starts it)
        torch.cuda.empty_cache()


def release_memory(*objects: Any) -> list[None]:
    """Drop the references given and release cached device memory; returns a None for each, to assign back.

    Example::

        model, optimizer = release_memory(model, optimizer)
    """
    clear_device_cache(garbage_collection=True)
    return [None] * len(objects)


def should_reduce_batch_size(exception: Exception) -> bool:
    """Whether ``exception`` is an out-of-memory error that a smaller batch may avoid."""
    return is_out_of_memory(exception)


def find_executable_batch_size(function: Callable[..., Any] | None = None, starting_batch_size: int = 128,
                               reduce_batch_size_fn: Callable[[], int] | None = None) -> Any:
    """A decorator: call ``function(batch_size, ...)`` from ``starting_batch_size``, and after each out-of-memory
    error again with 90% of the batch size (or what ``reduce_batch_size_fn()`` returns), releasing cached memory
    in between. The decorated function is called without the batch size.

    Example::

        @find_executable_batch_size(starting_batch_size=64)
        def train(batch_size, model):
            ...

        train(model)
    """
    if function is None:
        return functools.partial(find_executable_batch_size, starting_batch_size=starting_batch_size,
                                 reduce_batch_size_fn=reduce_batch_size_fn)
    batch_size = starting_batch_size

    def smaller() -> int:
        return int(batch_size * 0.9)

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        nonlocal batch_size
        clear_device_cache(garbage_collection=True)
        parameters = list(inspect.signature(function).parameters)
        if len(parameters) < len(args) + 1:
            given = ", ".join(f"{name}={value!r}" for name, value in zip(parameters[1:], args[1:], strict=False))
            raise TypeError(f"{function.__name__}() was called with the batch size as its first argument; the "
                            f"decorator passes it: call {function.__name__}({given}).")
        while True:
            if batch_size <= 0:
                raise RuntimeError(f"find_executable_batch_size: no batch size fits in memory; {function.__name__} "
                                   f"ran out of memory down to 1 (from {starting_batch_size}).")
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as error:
                if not should_reduce_batch_size(error):
                    raise
                clear_device_cache(garbage_collection=True)
                batch_size = (reduce_batch_size_fn or smaller)()

    return run
