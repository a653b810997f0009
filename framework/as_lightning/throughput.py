"""Lightning's ``measure_flops``: the floating-point operations of one forward (and backward) pass.

Example::

    with torch.device("meta"):
        model = MyModel()
        x = torch.randn(2, 32)
    flops = measure_flops(model, lambda: model(x), lambda y: y.sum())
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["measure_flops"]


def measure_flops(model: torch.nn.Module, forward_fn: Callable[[], torch.Tensor],
                  loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None) -> int:
    """The FLOPs ``forward_fn()`` does, and with ``loss_fn`` the backward from ``loss_fn(output)`` too (a model
    on the meta device costs no memory or time)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        output: Any = forward_fn()
        if loss_fn is not None:
            loss_fn(output).backward()
    return counter.get_total_flops()
