"""True low- or high-precision: the whole module, its inputs and its optimizer state in one dtype."""

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from framework.nested import map_tensors
from framework.precision.base import Precision


class TruePrecision(Precision):
    """Converts floating parameters and buffers to ``dtype`` and casts floating inputs to it.

    Forward passes run with ``dtype`` as torch's default dtype, so tensors a model creates
    on the fly (``torch.zeros(...)``) match its parameters. There is no autocast and no
    loss scaling: the optimizer state is in ``dtype`` too. Subclasses fix the dtype:
    ``BFloat16True``, ``Float16True``, ``Float64True``.
    """

    #: The dtype the parameters and the inputs are converted to.
    dtype: torch.dtype = torch.float32

    def __init__(self) -> None:
        super().__init__()
        self.param_dtype = self.dtype
        self.reduce_dtype = self.dtype

    def convert_module(self, module: nn.Module) -> nn.Module:
        """``module`` with every floating parameter and buffer in ``dtype`` (integer buffers are kept)."""
        return module.to(dtype=self.dtype)

    def module_init_context(self) -> contextlib.AbstractContextManager:
        """Layers created inside get their floating parameters in ``dtype`` directly (no fp32 copy first)."""
        return _default_dtype(self.dtype)

    def convert_input(self, data: Any) -> Any:
        """``data`` with its floating tensors cast to ``dtype`` (integer labels and masks are kept)."""
        dtype = self.dtype
        return map_tensors(data, lambda t: t.to(dtype) if t.is_floating_point() else t)

    def autocast(self) -> contextlib.AbstractContextManager:
        """Make ``dtype`` torch's default dtype for the duration of the block."""
        return _default_dtype(self.dtype)


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


class BFloat16True(TruePrecision):
    """``precision="bf16-true"``: everything in bfloat16; half the memory of fp32, no loss scaling needed.

    Example::

        Trainer(precision="bf16-true")
    """

    name = "bf16-true"
    dtype = torch.bfloat16

    def unsupported_reason(self, device: torch.device) -> str | None:
        """bf16 needs a GPU generation that has it."""
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            return "this GPU has no bfloat16 support. Use precision='16-true' or '16-mixed'."
        return None


class Float16True(TruePrecision):
    """``precision="16-true"``: everything in float16. Without loss scaling small gradients can underflow;
    prefer ``"16-mixed"`` for training and keep this for inference or fp16-safe models.

    Example::

        Trainer(precision="16-true")
    """

    name = "16-true"
    dtype = torch.float16


class Float64True(TruePrecision):
    """``precision="64-true"``: everything in float64, for numerical checks (gradient checking, ODE solvers).

    Example::

        Trainer(precision="64-true")
    """

    name = "64-true"
    dtype = torch.float64

    def unsupported_reason(self, device: torch.device) -> str | None:
        """MPS has no float64."""
        if device.type == "mps":
            return "MPS has no float64 support. Use accelerator='cpu' for float64."
        return None
