"""What a Module's ``training_step`` calls to optimize: its optimizers and schedulers, ``manual_backward``,
``clip_gradients``, and freezing parameters (``toggle_optimizer``, ``freeze``)."""

from typing import Any

import torch
from torch.optim import Optimizer

from framework.errors import MisconfigurationError


class OptimizationMethods:
    """The Module's optimization helpers (the Module subclasses this); they act through ``self.trainer``."""

    def optimizers(self, use_pl_optimizer: bool = True) -> Any:
        """The optimizer (or list of them) from ``configure_optimizers``; in manual optimization,
        stepping them counts ``global_step`` and goes through the precision.

        :param use_pl_optimizer: ``True`` (the default): in manual optimization, those wrapped optimizers;
            ``False``: the torch optimizers as ``configure_optimizers`` returned them.
        """
        optimizers = self.trainer.optimizers
        if use_pl_optimizer and not self.automatic_optimization:
            optimizers = self.trainer.run_context.manual_optimizers
        return optimizers[0] if len(optimizers) == 1 else list(optimizers)

    def lr_schedulers(self) -> Any:
        """The LR scheduler (or list of them), or None."""
        schedulers = [config.scheduler for config in self.trainer.lr_scheduler_configs]
        if not schedulers:
            return None
        return schedulers[0] if len(schedulers) == 1 else schedulers

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``loss.backward()`` for manual optimization, through the precision and the strategy.

        :param loss: the loss (other arguments go on to ``backward``).
        """
        if self.automatic_optimization:
            raise MisconfigurationError(
                "manual_backward is for manual optimization; set self.automatic_optimization = False."
            )
        self.trainer.fit_loop.manual.backward(loss, *args, **kwargs)

    def clip_gradients(self, optimizer: Optimizer, gradient_clip_val: float | None = None,
                       gradient_clip_algorithm: str | None = None) -> None:
        """Clip the gradients of ``optimizer``'s parameters by "norm" (default) or by "value".

        :param optimizer: the optimizer whose parameters' gradients are clipped.
        :param gradient_clip_val: the largest total norm or value; ``None`` (the default) or ``0``: no clipping.
        :param gradient_clip_algorithm: ``"norm"`` (what ``None``, the default, means) or ``"value"``.
        """
        if gradient_clip_val is None or gradient_clip_val == 0:
            return
        algorithm = gradient_clip_algorithm or "norm"
        optimizer = getattr(optimizer, "optimizer", optimizer)
        runtime = self.trainer.runtime
        if algorithm == "norm":
            # fp16 overflow steps have inf gradients: the precision skips those steps, clipping must not raise
            runtime.clip_gradients(self, optimizer, max_norm=gradient_clip_val, error_if_nonfinite=False)
        elif algorithm == "value":
            runtime.clip_gradients(self, optimizer, clip_val=gradient_clip_val)
        else:
            raise MisconfigurationError(
                f"gradient_clip_algorithm={algorithm!r} is not supported; accepted: 'norm', 'value'."
            )

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Freeze every parameter not optimized by ``optimizer`` (for alternating updates, e.g. GANs).

        :param optimizer: the optimizer (as ``optimizers()`` returns it, or the torch one) about to step.
        """
        optimizer = getattr(optimizer, "optimizer", optimizer)
        own = {id(p) for group in optimizer.param_groups for p in group["params"]}
        self._toggled = {}
        for param in self.parameters():
            if id(param) not in own:
                self._toggled[param] = param.requires_grad
                param.requires_grad = False

    def untoggle_optimizer(self, optimizer: Any) -> None:
        """Undo ``toggle_optimizer``.

        :param optimizer: the optimizer given to ``toggle_optimizer``; what that call froze is unfrozen in any case.
        """
        for param, requires_grad in getattr(self, "_toggled", {}).items():
            param.requires_grad = requires_grad
        self._toggled = {}

    def freeze(self) -> None:
        """No gradients for any parameter, and eval mode."""
        for param in self.parameters():
            param.requires_grad = False
        self.eval()

    def unfreeze(self) -> None:
        """Undo ``freeze``: gradients for every parameter, and train mode."""
        for param in self.parameters():
            param.requires_grad = True
        self.train()
