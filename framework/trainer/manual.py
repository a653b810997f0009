"""Manual optimization: the Module's ``training_step`` steps its optimizers itself (``automatic_optimization = False``).

The Trainer supplies what ``self.manual_backward(loss)`` and ``optimizer.step()`` do inside it: the
backward hooks, loss scaling, ``on_before_optimizer_step`` and the step count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from framework.errors import MisconfigurationError
from framework.trainer.step import StepHooks, check_training_output

if TYPE_CHECKING:
    from framework.trainer.run import Run


def check_manual_settings(run: Run) -> None:
    """Refuse the Trainer's arguments that only automatic optimization acts on."""
    if run.settings.gradient_clip_val:
        raise MisconfigurationError(
            f"Trainer(gradient_clip_val={run.settings.gradient_clip_val}) does nothing in manual optimization; "
            "call self.clip_gradients(optimizer, gradient_clip_val=...) in training_step instead."
        )
    if run.settings.accumulate_grad_batches != 1:
        raise MisconfigurationError(
            f"Trainer(accumulate_grad_batches={run.settings.accumulate_grad_batches}) does nothing in manual "
            "optimization; accumulate in training_step by stepping every N batches."
        )


class ManualOptimization:
    """One training batch under manual optimization, and the calls the Module makes during it."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.step_hooks: StepHooks | None = None  # resolved at fit's start, once the optimizers exist

    def step(self, batch: Any, batch_idx: int, is_last: bool) -> tuple[Any, torch.Tensor | None]:
        """Run ``training_step`` (which steps the optimizers); returns its output and loss."""
        run = self.run
        with run.runtime.autocast():
            output = run.training_step(batch, batch_idx)
        run.module._record_logs_of_compiled_step()
        loss = check_training_output(output, manual=True)
        update_scale = self.step_hooks.update_scale
        if update_scale is not None:  # once, after every optimizer of the batch stepped
            update_scale()
        run.state.batches_stepped += 1
        return output, loss

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``self.manual_backward(loss)``: the backward hooks around the strategy's backward."""
        hooks = self.step_hooks
        if hooks.before_backward is not None:
            hooks.before_backward(loss)
        hooks.backward(loss, *args, **kwargs)
        if hooks.after_backward is not None:
            hooks.after_backward()

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Any = None, **kwargs: Any) -> bool:
        """``opt.step()`` inside a manual ``training_step``: hooks, precision, then count the step."""
        hooks = self.step_hooks
        if hooks.before_optimizer_step is not None:
            if closure is None:
                _before_step(hooks, optimizer)
            else:  # the hook sees the gradients the closure made, as in Lightning: run it after each evaluation
                closure = _then_before_step(closure, hooks, optimizer)
        stepped = hooks.runtime_optimizer_step(optimizer, closure, **kwargs)
        self.run.state.global_step += 1
        return stepped


def _before_step(hooks: StepHooks, optimizer: torch.optim.Optimizer) -> None:
    if hooks.unscale is not None:  # the hook sees true gradients under loss scaling
        hooks.unscale(optimizer)
    hooks.before_optimizer_step(optimizer)


def _then_before_step(closure: Callable[[], Any], hooks: StepHooks,
                      optimizer: torch.optim.Optimizer) -> Callable[[], Any]:
    def evaluate() -> Any:
        result = closure()
        _before_step(hooks, optimizer)
        return result

    return evaluate
