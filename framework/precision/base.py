"""The Precision contract and its 32-bit base, which changes nothing."""

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from framework.errors import MisconfigurationError

# nullcontext is reusable, so one instance serves every step.
_NO_AUTOCAST = contextlib.nullcontext()


class Precision:
    """Full 32-bit precision: every method is the plain PyTorch operation.

    Mixed and true low-precision modes subclass this and override the few methods they
    change, so the loops call the same methods in every mode and never branch on it.

    Example::

        precision = Precision()
        with precision.autocast():
            loss = model(x).sum()
        precision.backward(loss)
        stepped = precision.optimizer_step(optimizer)   # False if the step was skipped
    """

    #: The precision's name, as ``Trainer(precision=...)`` takes it and ``trainer.precision`` returns it.
    name = "32-true"
    #: The dtype parameters are kept in (FSDP builds its MixedPrecisionPolicy from these two).
    param_dtype: torch.dtype = torch.float32
    #: The dtype gradients are reduced in across ranks; None: the parameters' dtype.
    reduce_dtype: torch.dtype | None = None

    def __init__(self) -> None:
        self.device = torch.device("cpu")

    def connect(self, device: torch.device) -> None:
        """Called by the Runtime with the device it runs on; raises when the device cannot do this mode.

        :raises MisconfigurationError: where ``device`` cannot run this mode (``unsupported_reason`` says why).
        """
        problem = self.unsupported_reason(device)
        if problem is not None:
            raise MisconfigurationError(f"precision={self.name!r} cannot run on {device}: {problem}")
        self.device = device

    def unsupported_reason(self, device: torch.device) -> str | None:
        """Why ``device`` cannot do this mode (and what to use instead), or None when it can."""
        return None

    def module_init_context(self) -> contextlib.AbstractContextManager:
        """The context for creating a module directly in this mode's parameter dtype (here: none)."""
        return contextlib.nullcontext()

    def convert_module(self, module: nn.Module) -> nn.Module:
        """Cast the module's parameters where the mode needs it (here: nothing)."""
        return module

    def convert_input(self, data: Any) -> Any:
        """Cast floating inputs where the mode needs it (here: nothing)."""
        return data

    def autocast(self) -> contextlib.AbstractContextManager:
        """The context forward passes and step functions run in (here: one that does nothing)."""
        return _NO_AUTOCAST

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Compute gradients of ``loss`` (scaled first in fp16 modes).

        :param loss: the tensor to differentiate, usually the step's scalar loss.
        :param args: passed on to ``loss.backward`` (``gradient``, ``retain_graph``...), as are ``kwargs``.
        """
        loss.backward(*args, **kwargs)

    def unscale(self, optimizer: Optimizer) -> None:
        """Bring the gradients of ``optimizer``'s parameters to their true scale before clipping."""

    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any] | None = None, **kwargs: Any) -> bool:
        """Step ``optimizer``; return False when the step was skipped (fp16 found inf/nan).

        :param optimizer: the optimizer to step.
        :param closure: a function that recomputes the loss (and runs backward), for ``optimizer.step(closure)``
            (LBFGS); ``None`` (default): ``optimizer.step()``.
        :param kwargs: other keyword arguments, for ``optimizer.step``.
        """
        if closure is None:
            optimizer.step(**kwargs)
        else:
            optimizer.step(closure=closure, **kwargs)
        return True

    def update_scale(self) -> None:
        """After an iteration's optimizer steps: adjust the fp16 loss scale (here: nothing to do)."""

    def state_dict(self) -> dict[str, Any]:
        """What must be saved to resume (the fp16 loss scale, for example)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
