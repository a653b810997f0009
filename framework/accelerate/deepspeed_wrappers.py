"""The objects ``accelerator.prepare`` returns under DeepSpeed, by Accelerate's names: the engine's driver, and the
optimizer and scheduler the engine steps itself."""

from __future__ import annotations

from typing import Any

import torch

from framework.accelerate.prepared import AcceleratedOptimizer, AcceleratedScheduler

__all__ = ["DeepSpeedEngineWrapper", "DeepSpeedOptimizerWrapper", "DeepSpeedSchedulerWrapper"]


class DeepSpeedEngineWrapper:
    """DeepSpeed's engine as Accelerate's wrapper drives it (``accelerator.backward`` does this itself).

    :param engine: DeepSpeed's engine.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def backward(self, loss: torch.Tensor, sync_gradients: bool = True, **kwargs: Any) -> None:
        """The engine's backward (which divides the loss by its accumulation steps), and its step where
        ``sync_gradients``."""
        self.engine.set_gradient_accumulation_boundary(is_boundary=sync_gradients)
        self.engine.backward(loss, **kwargs)
        if sync_gradients:
            self.engine.step()

    def get_global_grad_norm(self) -> float | None:
        """The gradient norm the engine's last step saw."""
        norm = self.engine.get_global_grad_norm()
        return None if norm is None else float(norm)


class DeepSpeedOptimizerWrapper(AcceleratedOptimizer):
    """The optimizer ``prepare`` returns under DeepSpeed: the engine's ZeRO optimizer, stepped by
    ``accelerator.backward`` at the end of each accumulation window; ``step()`` and ``zero_grad()`` do nothing.

    :param optimizer: the engine's optimizer.
    :param engine: DeepSpeed's engine.
    :param accelerator: the Accelerator.
    """

    def __init__(self, optimizer: Any, engine: Any = None, accelerator: Any = None) -> None:
        super().__init__(optimizer, runtime=getattr(accelerator, "_runtime", None),
                         gradient_state=getattr(accelerator, "gradient_state", None))
        self.engine = engine if engine is not None else self._runtime.strategy.engine

    @property
    def step_was_skipped(self) -> bool:
        """Whether the engine's last step was skipped (fp16 overflow)."""
        return self.engine is not None and not self.engine.was_step_applied()

    def step(self, closure: Any = None, **kwargs: Any) -> None:
        """Nothing: ``accelerator.backward`` steps the engine."""

    def state_dict(self) -> dict[str, Any]:
        """The engine's optimizer's state, as it gives it: under ZeRO, only this process's partition
        (``accelerator.save_state`` saves the whole state through the engine instead)."""
        return super().state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what ``state_dict()`` gave into the engine's optimizer (under ZeRO, this process's partition;
        ``accelerator.load_state`` restores through the engine instead)."""
        super().load_state_dict(state_dict)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing: the engine's step zeroes the gradients."""


class DeepSpeedSchedulerWrapper(AcceleratedScheduler):
    """The LR scheduler ``prepare`` returns under DeepSpeed: the engine steps it after each optimizer step it
    applies (once, not once per process); ``step()`` does nothing.

    :param scheduler: the scheduler the engine steps.
    :param optimizers: the prepared optimizers.
    :param accelerator: the Accelerator.
    """

    def __init__(self, scheduler: Any, optimizers: Any, accelerator: Any = None) -> None:
        super().__init__(scheduler, optimizers, gradient_state=getattr(accelerator, "gradient_state", None),
                         num_processes=1)

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Nothing: the engine steps the scheduler."""
