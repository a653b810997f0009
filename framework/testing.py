"""Helpers for testing distributed code on CPU with real processes, and for counting what would wait for a GPU."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import torch

from framework.runtime.launchers import start_processes
from framework.runtime.start_method import choose_start_method


def spawn(world_size: int, fn: Callable[..., Any], *args: Any, start_method: str = "auto",
          timeout: float = 60.0) -> list[Any]:
    """Run ``fn(rank, *args)`` on ``world_size`` real processes joined in a gloo process group; each rank's result.

    A rank that raises makes ``spawn`` raise the same exception (with the rank and its
    traceback) after stopping the others; a collective waiting longer than ``timeout``
    seconds fails instead of hanging the test. A Trainer or Runtime created inside ``fn``
    joins these ranks.

    The processes are forked where that is safe and spawned elsewhere (on a machine with GPUs,
    see ``framework.runtime.start_method``): define ``fn``, and the classes its arguments hold, at
    the top level of a module, so that a spawned process can import them.

    Example::

        def total(rank):      # at the top level of the test file
            value = torch.tensor([rank + 1.0])
            torch.distributed.all_reduce(value)
            return value.item()

        assert framework.testing.spawn(2, total) == [3.0, 3.0]
    """
    method = choose_start_method(start_method, script_available=False)
    return start_processes(_in_process_group, (fn, args, timeout), world_size, method)


def state_bytes(module: Any, optimizer: Any = None) -> dict[str, int]:
    """The bytes of training state this rank holds: ``parameters`` and ``gradients`` of ``module`` as it
    exposes them now, and ``optimizer`` (its state tensors); a DTensor counts its local part only.

    What the memory arithmetic of ZeRO is about: for Ψ fp32 parameters with Adam on N ranks,
    DDP holds 4Ψ + 4Ψ + 8Ψ, ZeRO-1 4Ψ + 4Ψ + 8Ψ/N, ZeRO-2 4Ψ + 4Ψ/N + 8Ψ/N (parameters
    whole between forward and backward), ZeRO-3 (4Ψ + 4Ψ + 8Ψ)/N. Parameters count as the module
    exposes them: while ZeRO-2 holds them gathered, FSDP also keeps this rank's part (4Ψ/N) aside,
    which is not counted.

    Example::

        class Measure(Callback):
            def on_after_backward(self, trainer, module):
                self.gradient_bytes = state_bytes(module)["gradients"]
    """
    parameters = list(module.parameters())
    held = {"parameters": sum(_local_bytes(p) for p in parameters),
            "gradients": sum(_local_bytes(p.grad) for p in parameters if p.grad is not None),
            "optimizer": 0}
    if optimizer is not None:
        inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer keeps this rank's state there
        held["optimizer"] = sum(_local_bytes(value) for entry in inner.state.values() for value in entry.values()
                                if isinstance(value, torch.Tensor))
    return held


def _local_bytes(tensor: Any) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def _in_process_group(fn: Callable[..., Any], args: tuple, timeout: float) -> Any:
    import torch.distributed as dist

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout))
    result = fn(rank, *args)
    dist.barrier()
    dist.destroy_process_group()
    return result


#: The Tensor methods that hand a tensor's value to Python: on a GPU each waits for the device.
HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


class HostReads:
    """How many tensor values were read on the host, by method, inside ``count_host_reads()``."""

    def __init__(self) -> None:
        self.by_method: dict[str, int] = dict.fromkeys(HOST_READS, 0)

    @property
    def total(self) -> int:
        """All reads, whatever the method."""
        return sum(self.by_method.values())


@contextlib.contextmanager
def count_host_reads() -> Iterator[HostReads]:
    """Count the calls of ``Tensor.item/tolist/cpu/numpy/__bool__/__float__/__int__/__index__`` in this block.

    On a GPU each such call waits until the device has computed the value (a host sync); on a
    CPU the calls are the same, so counting them in a CPU test tells how often a step would
    wait on a GPU. Compare against the same plain PyTorch loop: some reads are of host
    tensors (Adam's step counts) and cost nothing on either.

    Example::

        with framework.testing.count_host_reads() as reads:
            trainer.fit(model, loader)
        print(reads.total, reads.by_method["item"])
    """
    reads = HostReads()
    originals = {name: getattr(torch.Tensor, name) for name in HOST_READS}
    own = {name for name in HOST_READS if name in vars(torch.Tensor)}  # the others are inherited from C

    def counted(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def read(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            reads.by_method[name] += 1
            return original(self, *args, **kwargs)

        return read

    for name, original in originals.items():
        setattr(torch.Tensor, name, counted(name, original))
    try:
        yield reads
    finally:
        for name, original in originals.items():
            if name in own:
                setattr(torch.Tensor, name, original)
            else:
                delattr(torch.Tensor, name)
