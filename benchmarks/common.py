"""What several benchmarks share: pre-built batches as one iterable, and whether an optional package is there."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class Batches:
    """Pre-built batches as one iterable (a bare list would read as a list of loaders to Lightning)."""

    def __init__(self, batches: list) -> None:
        self.batches = batches

    def __iter__(self) -> Iterator[Any]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def importable(name: str) -> bool:
    """Whether ``import name`` works (Lightning and Accelerate rows appear only where it does)."""
    try:
        __import__(name)
    except ImportError:
        return False
    return True
