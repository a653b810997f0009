"""One training batch's optimization: the step closure, the step hooks, and what training_step may return.

The hooks around backward and the optimizer step are resolved once per fit (``StepHooks``),
and one ``StepClosure`` serves a whole epoch, so a step allocates nothing of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from framework import console
from framework.errors import MisconfigurationError, describe
from framework.hooks import Hook, overrides
from framework.precision import Precision
from framework.profilers.base import profiled
from framework.strategies import Strategy

if TYPE_CHECKING:
    from framework.trainer.run import Run


class StepClosure:
    """training_step, backward and the pre-step hooks of one batch, as the callable ``optimizer.step`` takes.

    One instance serves a whole epoch (``prepare`` points it at the next batch), so a step allocates no closure.
    """

    __slots__ = ("run", "hooks", "batch", "batch_idx", "optimizer", "stepping", "zeroing", "output", "loss", "ran",
                 "record_logs")

    def __init__(self, run: Run, optimizer: Any, hooks: StepHooks) -> None:
        self.run = run
        self.hooks = hooks  # resolved once per fit, before the first epoch
        self.optimizer = optimizer
        self.record_logs = run.module._record_logs_of_compiled_step
        self.prepare(None, 0, False)

    def prepare(self, batch: Any, batch_idx: int, stepping: bool) -> None:
        """Make the next call run ``training_step`` on ``batch``; ``stepping``: the optimizer steps after it."""
        self.batch = batch
        self.batch_idx = batch_idx
        self.stepping = stepping
        # As in Lightning: the first batch of each accumulation window zeroes the gradients, between its
        # training_step and its backward (every evaluation of the closure, for optimizers such as LBFGS).
        self.zeroing = batch_idx % self.run.settings.accumulate_grad_batches == 0
        self.output = None  # what training_step returned
        self.loss = None  # the loss backward saw
        self.ran = False  # an optimizer_step override must run the closure

    def __call__(self) -> torch.Tensor | None:
        run, hooks = self.run, self.hooks
        self.ran = True
        with run.runtime.autocast():
            output = run.training_step(self.batch, self.batch_idx)
        self.record_logs()
        loss = check_training_output(output, manual=False)
        if loss is not None and run.settings.accumulate_grad_batches > 1:
            loss = loss / run.settings.accumulate_grad_batches
        self.output, self.loss = output, loss
        if self.zeroing:
            if hooks.before_zero_grad is not None:
                hooks.before_zero_grad(self.optimizer)
            if hooks.zero_grad is not None:
                hooks.zero_grad(run.state.current_epoch, self.batch_idx, self.optimizer)
            else:
                self.optimizer.zero_grad()
        if loss is None:
            if not hooks.warned_of_skipping:
                _warn_of_skipping(hooks, self.batch_idx, run.state.current_epoch)
            return None
        if hooks.before_backward is not None:
            hooks.before_backward(loss)
        hooks.backward(loss)
        if hooks.after_backward is not None:
            hooks.after_backward()
        if self.stepping:
            if hooks.unscale is not None:
                hooks.unscale(self.optimizer)
            if hooks.before_optimizer_step is not None:
                hooks.before_optimizer_step(self.optimizer)
            if hooks.clip is not None:
                hooks.clip(self.optimizer, gradient_clip_val=run.settings.gradient_clip_val,
                           gradient_clip_algorithm=run.settings.gradient_clip_algorithm)
        return loss


def _warn_of_skipping(hooks: StepHooks, batch_idx: int, epoch: int) -> None:
    hooks.warned_of_skipping = True
    console.warn_user(f"`training_step` returned None at batch {batch_idx} of epoch {epoch}: that batch's backward "
                      "and optimizer step were skipped. If that was on purpose, ignore this warning (given once per "
                      "fit); if not, return the loss (a tensor, or a dict with a 'loss' tensor).")


def outputs_for_hooks(output: Any, loss: torch.Tensor | None) -> dict[str, Any]:
    """What ``on_train_batch_end`` receives, as in Lightning: ``{"loss": detached loss, **other keys}``.

    The loss is the one backward saw (divided by ``accumulate_grad_batches``); ``{}`` for None.
    """
    outputs = dict(output) if isinstance(output, dict) else {}
    if loss is not None:
        outputs["loss"] = loss.detach()
    return outputs


def check_training_output(output: Any, manual: bool) -> torch.Tensor | None:
    """The loss in what ``training_step`` returned; a clear error for anything not accepted."""
    if isinstance(output, torch.Tensor):
        return _scalar_loss(output, manual)
    if output is None:
        return None
    if isinstance(output, dict):
        loss = output.get("loss")
        if isinstance(loss, torch.Tensor):
            return _scalar_loss(loss, manual)
        if manual and "loss" not in output:
            return None
        raise MisconfigurationError(
            f"training_step returned a dict whose 'loss' is {describe(loss)}; "
            "it must hold the loss tensor under 'loss'."
        )
    if manual:
        raise MisconfigurationError(
            f"training_step returned {describe(output)}; in manual optimization it may return a tensor, a dict "
            "or None."
        )
    raise MisconfigurationError(
        f"training_step returned {describe(output)}; accepted: the loss tensor, a dict with a 'loss' tensor, or None "
        "to skip the batch."
    )


def _scalar_loss(loss: torch.Tensor, manual: bool) -> torch.Tensor:
    if not manual and loss.numel() != 1:
        raise MisconfigurationError(
            f"training_step returned a loss of shape {tuple(loss.shape)}; the loss must be a single number "
            "(reduce it, e.g. loss.mean())."
        )
    return loss


class StepHooks:
    """The hooks of the optimizer step, resolved once per fit (None where nothing overrides them), and the
    precision's and strategy's parts of the step, called directly where the other adds nothing."""

    def __init__(self, run: Run) -> None:
        hooks, runtime, profiler = run.hooks, run.runtime, run.profiling
        self.warned_of_skipping = False  # training_step returned None: said once per fit
        self.before_backward = hooks.get(Hook.ON_BEFORE_BACKWARD)
        self.after_backward = hooks.get(Hook.ON_AFTER_BACKWARD)
        self.before_optimizer_step = hooks.get(Hook.ON_BEFORE_OPTIMIZER_STEP)
        self.before_zero_grad = hooks.get(Hook.ON_BEFORE_ZERO_GRAD)
        self.clip = hooks.get(Hook.CONFIGURE_GRADIENT_CLIPPING, with_default=bool(run.settings.gradient_clip_val))
        # Not timed: it calls the optimizer step, which is timed as "optimizer_step" itself.
        self.optimizer_step = hooks.get(Hook.OPTIMIZER_STEP, timed=False)
        self.zero_grad = hooks.get(Hook.OPTIMIZER_ZERO_GRAD)
        strategy = runtime.strategy
        # With loss scaling, on_before_optimizer_step and clipping see the true gradients, as in Lightning.
        precision = strategy.precision
        needs_true_grads = self.before_optimizer_step is not None or self.clip is not None
        self.unscale = precision.unscale if needs_true_grads and overrides(precision, Precision, "unscale") else None
        # Once per training batch, after its optimizer steps (fp16: the loss scale moves once per iteration).
        self.update_scale = precision.update_scale if overrides(precision, Precision, "update_scale") else None
        # Where the strategy adds nothing to the precision's step or backward, call the precision
        # directly: one Python call less on every step.
        if overrides(strategy, Strategy, "optimizer_step"):
            self.runtime_optimizer_step = strategy.optimizer_step
        else:
            self.runtime_optimizer_step = strategy.precision.optimizer_step
        self.runtime_optimizer_step = profiled(profiler, "optimizer_step", self.runtime_optimizer_step)
        self.backward = hooks.get(Hook.BACKWARD) or profiled(profiler, "backward", _backward(strategy, run.model))


def _backward(strategy: Strategy, model: torch.nn.Module) -> Any:
    """The backward of ``strategy``: its precision's directly where the strategy adds nothing to it."""
    if not overrides(strategy, Strategy, "backward"):
        return strategy.precision.backward

    def backward(loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        strategy.backward(loss, model, *args, **kwargs)

    return backward
