"""``OptimizerProxy``: an optimizer whose ``step()`` goes through the Trainer, as ``self.optimizers()`` hands it to
a Module that optimizes by hand, and as a Module's ``optimizer_step`` override receives it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.optim import Optimizer


class OptimizerProxy:
    """An optimizer whose ``step()`` goes through the Trainer (precision, ``global_step``).

    What ``self.optimizers()`` returns in manual optimization, and what a Module's own
    ``optimizer_step`` override receives. The rest of the optimizer's interface is spelled
    out here on purpose (no implicit attribute forwarding); ``.optimizer`` is the real one.
    """

    def __init__(self, optimizer: Optimizer, step: Callable[..., Any]) -> None:
        self.optimizer = optimizer
        self._step = step

    def step(self, closure: Any = None, **kwargs: Any) -> Any:
        """Step the real optimizer through the precision; in manual optimization also the hooks and ``global_step``."""
        return self._step(self.optimizer, closure, **kwargs)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the real optimizer's gradients (to None by default, as in torch)."""
        self.optimizer.zero_grad(set_to_none=set_to_none)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The real optimizer's ``param_groups`` (the same list: changes reach it)."""
        return self.optimizer.param_groups

    @property
    def state(self) -> Any:
        """The real optimizer's per-parameter ``state``."""
        return self.optimizer.state

    @property
    def defaults(self) -> dict[str, Any]:
        """The real optimizer's ``defaults``."""
        return self.optimizer.defaults

    def state_dict(self) -> dict[str, Any]:
        """The real optimizer's ``state_dict()``."""
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load ``state_dict`` into the real optimizer."""
        self.optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add ``param_group`` to the real optimizer."""
        self.optimizer.add_param_group(param_group)

    def __repr__(self) -> str:
        return f"OptimizerProxy({self.optimizer!r})"
