"""Helpers for testing distributed code on CPU with real processes."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from framework.runtime.launchers import start_processes


def spawn(world_size: int, fn: Callable[..., Any], *args: Any, start_method: str = "fork",
          timeout: float = 60.0) -> list[Any]:
    """Run ``fn(rank, *args)`` on ``world_size`` real processes joined in a gloo process group; each rank's result.

    A rank that raises makes ``spawn`` raise the same exception (with the rank and its
    traceback) after stopping the others; a collective waiting longer than ``timeout``
    seconds fails instead of hanging the test. A Trainer or Runtime created inside ``fn``
    joins these ranks.

    Example::

        def total(rank):
            value = torch.tensor([rank + 1.0])
            torch.distributed.all_reduce(value)
            return value.item()

        assert framework.testing.spawn(2, total) == [3.0, 3.0]
    """
    return start_processes(_in_process_group, (fn, args, timeout), world_size, start_method)


def _in_process_group(fn: Callable[..., Any], args: tuple, timeout: float) -> Any:
    import torch.distributed as dist

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout))
    result = fn(rank, *args)
    dist.barrier()
    dist.destroy_process_group()
    return result
