"""How a Module is optimized: the hooks that say with what and how (``configure_optimizers``, ``backward``,
``optimizer_step``, ...), and what ``training_step`` calls to optimize by hand: its optimizers and schedulers,
``manual_backward``, ``clip_gradients``, and freezing parameters (``toggle_optimizer``, ``freeze``)."""

from collections.abc import Callable
from typing import Any

import torch
from torch.optim import Optimizer

from framework.errors import MisconfigurationError


class OptimizationMethods:
    """The Module's optimization hooks and helpers (the Module subclasses this); the helpers act through
    ``self.trainer``."""

    def configure_optimizers(self) -> Any:
        """The optimizers and learning-rate schedulers to train with, asked for once a fit, after
        ``configure_model`` (so ``self.parameters()`` holds every layer, sharded where the strategy shards).

        It may return:

        - an optimizer;
        - a list or tuple of optimizers (several need manual optimization);
        - a tuple of two lists, ``([optimizers], [schedulers])``, each scheduler a scheduler or a scheduler dict;
        - a dict ``{"optimizer": optimizer, "lr_scheduler": scheduler or scheduler dict, "monitor": metric}``, or a
          list or tuple of such dicts;
        - ``None``, only in manual optimization (a run without an optimizer).

        A scheduler dict says how the Trainer steps the scheduler. Its keys (any other key is an error that names
        the key meant):

        - ``"scheduler"`` (required): the scheduler;
        - ``"interval"``: ``"epoch"`` (the default: after each epoch) or ``"step"`` (after each optimizer step);
        - ``"frequency"``: step it every this many intervals (a positive int; default 1);
        - ``"monitor"``: the logged metric a ``ReduceLROnPlateau`` steps by (required for one);
        - ``"strict"``: ``True`` (the default) raises where the monitored metric was not logged; ``False`` skips
          the scheduler's step then;
        - ``"name"``: what ``LearningRateMonitor`` logs its rate as (default ``lr-<optimizer class>``).

        In manual optimization the Trainer steps no scheduler: ``training_step`` calls ``self.lr_schedulers()``
        and steps them.

        Example::

            def configure_optimizers(self):
                optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3)
                scheduler = torch.optim.lr_scheduler.OneCycleLR(
                    optimizer, max_lr=1e-2, total_steps=self.trainer.estimated_stepping_batches)
                return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

        :raises MisconfigurationError: for a form not listed above, a scheduler dict with an unknown key or a bad
            ``interval`` or ``frequency``, a ``ReduceLROnPlateau`` without ``"monitor"``, ``None`` or several
            optimizers under automatic optimization.
        """
        return None

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Compute gradients of ``loss``; override to change how (``retain_graph=True``, for instance). The
        Trainer's precision scales the loss where it needs to (``16-mixed``) and the strategy synchronizes the
        gradients, as in ``loss.backward()`` under DDP.

        :param loss: the loss, divided by ``accumulate_grad_batches`` (other arguments go on to ``backward``).
        """
        self.trainer.runtime.backward(loss, *args, model=self.trainer.model, **kwargs)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Optimizer,
                       optimizer_closure: Callable[[], Any] | None = None) -> None:
        """Step the optimizer, once per ``accumulate_grad_batches`` batches; override to change how (a
        learning-rate warm-up, for instance). The closure runs the batch's ``training_step``, backward and
        clipping; an override must call ``optimizer.step(closure=optimizer_closure)`` (or the closure itself),
        else nothing trains.

        Example::

            def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
                warm = min(1.0, (self.trainer.global_step + 1) / 500)
                for group in optimizer.param_groups:
                    group["lr"] = warm * self.hparams.lr
                optimizer.step(closure=optimizer_closure)

        :param epoch: the current epoch.
        :param batch_idx: the batch's index in the epoch.
        :param optimizer: the optimizer to step.
        :param optimizer_closure: runs ``training_step`` through backward and clipping; pass it to ``optimizer.step``.
        """
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Optimizer) -> None:
        """Clear ``optimizer``'s gradients: on the first batch of each accumulation window, after its
        ``training_step`` and before its backward, as in Lightning. Override it for
        ``optimizer.zero_grad(set_to_none=False)``, for instance.

        :param epoch: the current epoch.
        :param batch_idx: the batch's index in the epoch.
        :param optimizer: the optimizer whose gradients to clear.
        """
        optimizer.zero_grad()

    def configure_gradient_clipping(self, optimizer: Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Clip the gradients before each optimizer step, after ``on_before_optimizer_step``; by default with the
        Trainer's ``gradient_clip_val`` and ``gradient_clip_algorithm`` (``self.clip_gradients``). Override it to
        clip some parameters only, or by another rule.

        :param optimizer: the optimizer about to step.
        :param gradient_clip_val: the Trainer's ``gradient_clip_val``.
        :param gradient_clip_algorithm: the Trainer's ``gradient_clip_algorithm``.
        """
        self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val,
                            gradient_clip_algorithm=gradient_clip_algorithm)

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Step one learning-rate scheduler when its ``interval`` and ``frequency`` say so; override it for a
        scheduler whose ``step`` takes other arguments (timm's, for instance).

        :param scheduler: the scheduler to step.
        :param metric: the monitored value for a ``ReduceLROnPlateau``; ``None`` for schedulers that monitor nothing.
        """
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

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
        """``loss.backward()`` for manual optimization (``self.automatic_optimization = False``), through the
        precision (loss scaling) and the strategy (gradient synchronization). Stepping an optimizer that
        ``self.optimizers()`` returned counts ``global_step``.

        Example::

            class GAN(framework.Module):
                def __init__(self):
                    super().__init__()
                    self.automatic_optimization = False
                    ...

                def training_step(self, batch, batch_idx):
                    g_opt, d_opt = self.optimizers()
                    d_loss = self.discriminator_loss(batch)
                    d_opt.zero_grad()
                    self.manual_backward(d_loss)
                    d_opt.step()
                    g_loss = self.generator_loss(batch)
                    g_opt.zero_grad()
                    self.manual_backward(g_loss)
                    g_opt.step()
                    self.log_dict({"d_loss": d_loss, "g_loss": g_loss})

        :param loss: the loss (other arguments go on to ``backward``).
        :raises MisconfigurationError: under automatic optimization.
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
        :raises MisconfigurationError: where ``gradient_clip_algorithm`` is neither "norm" nor "value" (and
            ``gradient_clip_val`` is set).
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
