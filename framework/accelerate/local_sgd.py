"""Local SGD: each process steps on its own gradients, without all-reducing them, and the processes average
their weights every few steps: less communication, for slow links between machines."""

from types import TracebackType
from typing import Any

import torch

from framework.accelerate.utils.enums import DistributedType
from framework.checks import is_int
from framework.errors import MisconfigurationError, describe
from framework.strategies.parallel import collective_by_dtype


class LocalSGD:
    """Within the block, the prepared ``model``'s gradients are not all-reduced; every ``local_sgd_steps`` calls
    of ``step()``, and when the block ends, every process's weights become the processes' mean. On one process
    (or with ``enabled=False``) nothing changes.

    Example::

        with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=8) as local_sgd:
            for x, y in loader:
                with accelerator.accumulate(model):
                    accelerator.backward(loss_fn(model(x), y))
                    optimizer.step()
                    optimizer.zero_grad()
                    local_sgd.step()
    """

    def __init__(self, accelerator: Any, model: torch.nn.Module, local_sgd_steps: int, enabled: bool = True) -> None:
        if accelerator.distributed_type not in (DistributedType.NO, DistributedType.MULTI_CPU,
                                                DistributedType.MULTI_GPU):
            raise MisconfigurationError(f"LocalSGD runs with DDP (MULTI_CPU or MULTI_GPU), not with "
                                        f"{accelerator.distributed_type.value}: sharded weights cannot be averaged "
                                        "apart from the step.")
        if not is_int(local_sgd_steps) or local_sgd_steps < 1:
            raise MisconfigurationError(f"LocalSGD(local_sgd_steps={describe(local_sgd_steps)}): accepted a "
                                        "positive int.")
        self.accelerator = accelerator
        self.model = model
        self.local_sgd_steps = local_sgd_steps
        self.enabled = enabled and accelerator.use_distributed
        self.num_steps = 0
        self._unsynced: Any = None

    def __enter__(self) -> "LocalSGD":
        if self.enabled:
            self._unsynced = self.model.no_sync()
            self._unsynced.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.enabled:
            if error is None:
                self._average()
            self._unsynced.__exit__(kind, error, trace)

    def step(self) -> None:
        """Count an optimizer step; every ``local_sgd_steps``-th one averages the weights over the processes."""
        self.num_steps += 1
        if self.enabled and self.num_steps % self.local_sgd_steps == 0:
            self._average()

    def _average(self) -> None:
        """Every process's weights become the mean over the processes (one all-reduce per dtype)."""
        self.accelerator.wait_for_everyone()
        collective_by_dtype(list(self.model.parameters()), lambda flat: self.accelerator.reduce(flat, reduction="mean"))
