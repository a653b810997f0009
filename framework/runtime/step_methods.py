"""The Runtime's part of a training step: autocast, backward, the optimizer step, gradient clipping and skipping
the gradient sync, each through the Strategy and the Precision (the Runtime subclasses ``StepMethods``)."""

import contextlib
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from framework.errors import MisconfigurationError
from framework.runtime.wrappers import forward_module, original_optimizer


class StepMethods:
    """What a hand-written loop calls on its Runtime inside a step; they use its ``strategy`` and ``precision``."""

    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision's context for forward passes (one that does nothing in ``"32-true"``)."""
        return self.precision.autocast()

    def backward(self, tensor: torch.Tensor, *args: Any, model: nn.Module | None = None, **kwargs: Any) -> None:
        """``tensor.backward()`` through the strategy and precision (fp16: the loss is scaled first).

        :param tensor: the loss (other arguments go on to ``backward``).
        :param model: the set-up module the loss came from, for strategies that need it; ``None`` (the default).
        """
        self.strategy.backward(tensor, model if model is None else forward_module(model), *args, **kwargs)

    def optimizer_step(self, optimizer: Optimizer, closure: Any = None, **kwargs: Any) -> bool:
        """Step ``optimizer`` through the precision; False when the step was skipped.

        :param optimizer: the optimizer (set up or not).
        :param closure: a function computing the loss, passed on to ``optimizer.step``; ``None`` (the default).
        """
        return self.strategy.optimizer_step(original_optimizer(optimizer), closure, **kwargs)

    def clip_gradients(
        self,
        module: nn.Module,
        optimizer: Optimizer,
        clip_val: float | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        error_if_nonfinite: bool = True,
    ) -> torch.Tensor | None:
        """Clip by value (``clip_val``) or by total norm (``max_norm``); returns the norm when clipping by norm.

        With fp16 the gradients are unscaled first. ``error_if_nonfinite``, as in
        Fabric: a total norm that is inf or nan raises (pass False to clip anyway).

        :param module: the set-up module.
        :param optimizer: the optimizer whose parameters' gradients are clipped.
        :param clip_val: clamp each gradient to ``[-clip_val, clip_val]``; give it or ``max_norm``, not both.
        :param max_norm: scale the gradients down to this total norm.
        :param norm_type: the p of the p-norm ``max_norm`` bounds; default 2.0.
        :param error_if_nonfinite: see above; default ``True``.
        :raises MisconfigurationError: where both or neither of ``clip_val`` and ``max_norm`` are given.
        """
        if (clip_val is None) == (max_norm is None):
            raise MisconfigurationError("clip_gradients needs exactly one of clip_val= or max_norm=.")
        module, optimizer = forward_module(module), original_optimizer(optimizer)
        if max_norm is not None:
            return self.strategy.clip_gradients_norm(module, optimizer, float(max_norm), norm_type,
                                                     error_if_nonfinite=error_if_nonfinite)
        self.strategy.clip_gradients_value(module, optimizer, float(clip_val))
        return None

    def no_backward_sync(self, module: nn.Module, enabled: bool = True) -> contextlib.AbstractContextManager:
        """Skip the gradient all-reduce inside this context (gradient accumulation micro-batches).

        Example::

            with runtime.no_backward_sync(model, enabled=not is_last_micro_batch):
                runtime.backward(model(x).sum())

        :param module: the set-up module.
        :param enabled: ``False`` makes the context do nothing (default ``True``).
        """
        return self.strategy.no_backward_sync(forward_module(module), enabled)
