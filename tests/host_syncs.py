"""Counting what would make the host wait for a GPU: reads of tensor values on the host.

On a GPU each of these calls waits until the device has computed the value. On a CPU they
cost nothing, but the calls are the same Python calls, so counting them on a CPU tells how
often a step would wait on a GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

# Every Tensor method that hands a tensor's value to Python.
READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


class HostReads:
    """How many value reads were made, by method, while ``counting()`` is active."""

    def __init__(self) -> None:
        self.by_method: dict[str, int] = dict.fromkeys(READS, 0)

    @property
    def total(self) -> int:
        return sum(self.by_method.values())


@contextlib.contextmanager
def counting_host_reads() -> Iterator[HostReads]:
    """Count ``Tensor.item/tolist/cpu/numpy/__bool__/__float__/__int__/__index__`` calls in this block."""
    reads = HostReads()
    originals = {name: getattr(torch.Tensor, name) for name in READS}

    def counted(name: str, original):
        def read(self, *args, **kwargs):
            reads.by_method[name] += 1
            return original(self, *args, **kwargs)

        return read

    for name, original in originals.items():
        setattr(torch.Tensor, name, counted(name, original))
    try:
        yield reads
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
