"""The precision of a DeepSpeed run: DeepSpeed's own fp16/bf16 modes, in place of autocast and our loss scaler."""

from typing import Any

import torch

from framework.nested import map_tensors
from framework.precision.base import Precision

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


class DeepSpeedPrecision(Precision):
    """What ``precision=`` means under DeepSpeed, as in Lightning: ``"16-mixed"`` turns on the config's ``fp16``
    block, ``"bf16-mixed"`` its ``bf16`` block. The engine then keeps the weights in that dtype with fp32 master
    copies in the optimizer, and (fp16) scales the loss with its own dynamic scaler; there is no autocast. What
    is left here is casting floating inputs to the weights' dtype. Backward and the step are the engine's
    (``DeepSpeedStrategy`` calls it), so this object's ``backward`` and ``optimizer_step`` are never used.

    :param name: the precision asked for (``"32-true"``, ``"16-mixed"``, ``"bf16-mixed"``, ``"16-true"``,
        ``"bf16-true"``).
    :param dtype: ``"fp16"``, ``"bf16"`` or ``"fp32"``: the engine's weights' dtype (its config decides it).
    """

    def __init__(self, name: str = "32-true", dtype: str = "fp32") -> None:
        super().__init__()
        self.name = name
        self.use(dtype)

    def use(self, dtype: str) -> None:
        """Cast inputs to ``dtype`` (``"fp16"``, ``"bf16"``, ``"fp32"``), as the engine's config has it."""
        self.dtype = _DTYPES[dtype]
        self.param_dtype = self.dtype

    def convert_input(self, data: Any) -> Any:
        """``data`` with its floating tensors in the weights' dtype (integer labels and masks are kept)."""
        dtype = self.dtype
        if dtype == torch.float32:
            return data
        return map_tensors(data, lambda t: t.to(dtype) if t.is_floating_point() else t)

    def __repr__(self) -> str:
        return f"DeepSpeedPrecision({self.name!r}, weights in {self.dtype})"
