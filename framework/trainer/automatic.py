"""Automatic optimization: the Trainer steps the Module's one optimizer (``automatic_optimization = True``).

Per batch: ``training_step`` and backward run inside a closure that the optimizer's ``step`` calls (as
LBFGS needs), without the gradient all-reduce while gradients accumulate; then the precision's scale
update, the step count and the schedulers that step by step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from framework.errors import MisconfigurationError
from framework.trainer.optimizer_proxy import OptimizerProxy
from framework.trainer.optimizers import step_schedulers
from framework.trainer.step import StepClosure, StepHooks

if TYPE_CHECKING:
    from framework.trainer.run import Run


class AutomaticOptimization:
    """One training batch under automatic optimization."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.context = run.context
        self.step_hooks: StepHooks | None = None  # resolved at fit's start, once the optimizers exist
        self.closure: StepClosure | None = None  # made at each epoch's start, for the optimizer of that epoch
        self.applied = True  # the last optimizer step changed the weights (False: fp16 skipped it)

    def start_epoch(self) -> None:
        """Make the closure the epoch's steps run in."""
        self.closure = StepClosure(self.run, self.context.optimizers[0], self.step_hooks)

    def step(self, batch: Any, batch_idx: int, is_last: bool) -> tuple[Any, torch.Tensor | None]:
        """Train on one batch: the closure (``training_step``, backward) alone while gradients accumulate, else
        inside the optimizer's step; returns ``training_step``'s output and loss."""
        run, state = self.run, self.run.state
        accumulate = run.settings.accumulate_grad_batches
        stepping = is_last or (batch_idx + 1) % accumulate == 0
        closure = self.closure
        closure.prepare(batch, batch_idx, stepping)
        optimizer = closure.optimizer
        if not stepping:
            with run.runtime.no_backward_sync(run.model):
                closure()
            return closure.output, closure.loss
        hooks = self.step_hooks
        if hooks.optimizer_step is None:
            stepped = hooks.runtime_optimizer_step(optimizer, closure)
        else:
            stepped = self._user_optimizer_step(optimizer, closure, batch_idx)
        if hooks.update_scale is not None:
            hooks.update_scale()
        # A step skipped for inf/nan gradients (fp16) still counts, as in Lightning; only the
        # schedulers wait for a step that really changed the weights.
        state.global_step += 1
        self.applied = stepped
        if self.context.has_step_schedulers and stepped:  # in this order: knowing ``stepped`` may wait for the device
            step_schedulers(run, "step", plateau=False)
        if is_last:
            step_schedulers(run, "epoch", plateau=False)
        state.batches_stepped += 1
        return closure.output, closure.loss

    def _user_optimizer_step(self, optimizer: torch.optim.Optimizer, closure: StepClosure, batch_idx: int) -> bool:
        """The Module's ``optimizer_step`` override, given an optimizer whose ``step`` goes through the runtime."""
        run = self.run
        user_step, runtime_step = self.step_hooks.optimizer_step, self.step_hooks.runtime_optimizer_step
        outcome: list[bool] = []

        def step_through(opt: torch.optim.Optimizer, step_closure: Any = None, **kwargs: Any) -> Any:
            outcome.append(runtime_step(opt, step_closure, **kwargs))

        user_step(run.state.current_epoch, batch_idx, OptimizerProxy(optimizer, step_through), closure)
        if not closure.ran:
            raise MisconfigurationError(
                "Your optimizer_step override did not call optimizer.step(closure=optimizer_closure); the closure "
                "runs training_step and backward, so without it nothing is trained."
            )
        if len(outcome) == 1:
            return outcome[0]  # as it is: asking whether a fused fp16 step went through waits for the device
        return all(outcome) and bool(outcome)
