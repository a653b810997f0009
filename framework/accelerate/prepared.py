"""The prepared optimizer and LR scheduler: they step only when the gradients are synced (the end of an
accumulation window), as Accelerate's do."""

from collections.abc import Callable
from typing import Any

from torch.optim import Optimizer

from framework.accelerate.gradient_state import GradientState
from framework.accelerate.newest_accelerator import current_accelerator
from framework.errors import MisconfigurationError
from framework.runtime.wrappers import RuntimeOptimizer


class AcceleratedOptimizer(RuntimeOptimizer):
    """The optimizer ``prepare`` returns: ``step()`` goes through the precision (fp16 loss scaling) on the batches
    that sync gradients and does nothing on the others; ``zero_grad()`` likewise keeps accumulating gradients.
    ``step_was_skipped`` tells whether the last step was skipped for inf/nan gradients (fp16).

    Example::

        model, optimizer = accelerator.prepare(model, optimizer)
        with accelerator.accumulate(model):
            accelerator.backward(loss)
            optimizer.step()        # only every gradient_accumulation_steps batches
            optimizer.zero_grad()
    """

    def __init__(self, optimizer: Optimizer, device_placement: bool = True, scaler: Any = None, *,
                 runtime: Any = None, gradient_state: GradientState | None = None) -> None:
        accelerator = current_accelerator()
        if runtime is None and accelerator is None:
            raise MisconfigurationError("AcceleratedOptimizer(optimizer) steps for an Accelerator: create the "
                                        "Accelerator first, or let accelerator.prepare(optimizer) make it.")
        super().__init__(optimizer, runtime or accelerator._runtime)
        self.gradient_state = gradient_state or accelerator.gradient_state
        self._stepped: Any = True

    @property
    def step_was_skipped(self) -> bool:
        """Whether the last step that was due was skipped because fp16 gradients held inf or nan."""
        return not self._stepped

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """Step through the precision when the gradients are synced; otherwise leave the weights alone."""
        if self.gradient_state.sync_gradients:
            self._stepped = self._runtime.strategy.optimizer_step(self._optimizer, closure, **kwargs)
        return None

    def train(self) -> None:
        """Put an optimizer that has a training mode (schedule-free ones) into it; others have nothing to do."""
        if callable(getattr(self._optimizer, "train", None)):
            self._optimizer.train()

    def eval(self) -> None:
        """Put an optimizer that has an evaluation mode (schedule-free ones) into it; others have nothing to do."""
        if callable(getattr(self._optimizer, "eval", None)):
            self._optimizer.eval()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the gradients when the gradients are synced; otherwise keep accumulating them."""
        if self.gradient_state.sync_gradients:
            self._optimizer.zero_grad(set_to_none=set_to_none)


class AcceleratedScheduler:
    """The LR scheduler ``prepare`` returns: it steps only after an optimizer step that happened (synced gradients,
    no fp16 overflow), and then ``num_processes`` times unless ``split_batches``, as Accelerate's does: a
    schedule written for the one-process number of batches ends with the same learning rate.

    Example::

        scheduler = accelerator.prepare(torch.optim.lr_scheduler.LinearLR(optimizer, total_iters=len(loader)))
    """

    def __init__(self, scheduler: Any, optimizers: AcceleratedOptimizer | list[AcceleratedOptimizer],
                 step_with_optimizer: bool = True, split_batches: bool = False, *,
                 gradient_state: GradientState | None = None, num_processes: int | None = None) -> None:
        accelerator = current_accelerator()
        if (gradient_state is None or num_processes is None) and accelerator is None:
            raise MisconfigurationError("AcceleratedScheduler(scheduler, optimizers) steps for an Accelerator: create "
                                        "the Accelerator first, or let accelerator.prepare(scheduler) make it.")
        self.scheduler = scheduler
        self.optimizers = optimizers if isinstance(optimizers, (list, tuple)) else [optimizers]
        self.gradient_state = gradient_state or accelerator.gradient_state
        self.step_with_optimizer = step_with_optimizer
        processes = num_processes if num_processes is not None else accelerator.num_processes
        self.steps_per_update = 1 if split_batches else processes

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Step as described above."""
        if not self.step_with_optimizer:
            self.scheduler.step(*args, **kwargs)
            return
        if not self.gradient_state.sync_gradients:
            if self.gradient_state.adjust_scheduler and hasattr(self.scheduler, "_step_count"):
                self.scheduler._step_count += 1  # keeps torch's "step before optimizer.step()" warning quiet
            return
        if any(optimizer.step_was_skipped for optimizer in self.optimizers):
            return
        for _ in range(self.steps_per_update):
            total = getattr(self.scheduler, "total_steps", None)  # OneCycleLR refuses steps past its total
            if total is None or self.scheduler.last_epoch < total:
                self.scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        """The scheduler's last learning rates."""
        return self.scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state dict."""
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the scheduler's state dict."""
        self.scheduler.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)

    def __repr__(self) -> str:
        return f"AcceleratedScheduler({self.scheduler!r})"
