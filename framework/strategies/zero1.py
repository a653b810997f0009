"""ZeRO-1: DDP with the optimizer state split over the ranks (``ZeroRedundancyOptimizer``)."""

import inspect
from typing import Any

from torch.optim import Optimizer

from framework.errors import MisconfigurationError
from framework.strategies.ddp import DDPStrategy


class ShardedStrategy(DDPStrategy):
    """DDP whose optimizer state is split over the ranks: each rank steps its share of the
    parameters and broadcasts them (``torch.distributed.optim.ZeroRedundancyOptimizer``).

    Per rank, for Ψ parameters with Adam in fp32: 4Ψ parameters + 4Ψ gradients + 8Ψ/N
    optimizer state, against DDP's 16Ψ. The optimizer ``configure_optimizers`` returns is
    rebuilt as a ZeroRedundancyOptimizer of the same class, settings and parameter groups;
    its LR schedulers keep working (they change the same parameter groups). Checkpoints are
    one file, the optimizer state gathered on rank 0, so they load with any number of ranks.

    The constructor is :class:`~framework.strategies.DDPStrategy`'s: its arguments are documented there.

    Example::

        Trainer(accelerator="cpu", devices=2, strategy="zero1")
    """

    name = "sharded"

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        """``optimizer`` rebuilt as a ZeroRedundancyOptimizer holding this rank's share of the state.

        :raises MisconfigurationError: where ``optimizer`` has stepped already (holds state) and there are several
            processes.
        """
        if self.world_size == 1:
            return optimizer
        from torch.distributed.optim import ZeroRedundancyOptimizer

        if isinstance(optimizer, ZeroRedundancyOptimizer):
            return optimizer
        if optimizer.state:
            raise MisconfigurationError(
                f"strategy='zero1' got a {type(optimizer).__name__} that has stepped already; ZeRO-1 splits the "
                "state of a fresh optimizer. Create it in configure_optimizers (or before runtime.setup)."
            )
        groups = [dict(group) for group in optimizer.param_groups]
        sharded = ZeroRedundancyOptimizer(groups, optimizer_class=type(optimizer), **_constructor_defaults(optimizer))
        # The groups LR schedulers change are the user's optimizer's; ZeRO copies them to its shard every step.
        sharded.param_groups = optimizer.param_groups
        _count_steps_for_schedulers(optimizer, sharded)
        return sharded

    def load_optimizer_state(self, optimizer: Optimizer, state: dict[str, Any]) -> None:
        """Load the whole optimizer ``state`` (each rank keeps its share), keeping the user's parameter groups
        the ones ZeRO steps with (its ``load_state_dict`` makes new ones, which LR schedulers would miss)."""
        groups = optimizer.param_groups
        optimizer.load_state_dict(state)
        for group, loaded in zip(groups, optimizer.param_groups, strict=True):
            group.update({key: value for key, value in loaded.items() if key != "params"})
        optimizer.param_groups = groups

    @property
    def saves_on_one_rank(self) -> bool:
        """False on several ranks: the optimizer state is gathered from all of them."""
        return self.world_size == 1

    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """The whole optimizer state, gathered on rank 0 (an empty dict on the other ranks)."""
        if not hasattr(optimizer, "consolidate_state_dict"):
            return optimizer.state_dict()
        optimizer.consolidate_state_dict(to=0)
        return optimizer.state_dict() if self.is_global_zero else {}


def _constructor_defaults(optimizer: Optimizer) -> dict[str, Any]:
    """The optimizer's defaults its constructor takes (AdamW's include ``decoupled_weight_decay``, which it fixes)."""
    accepted = inspect.signature(type(optimizer).__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    return {key: value for key, value in optimizer.defaults.items() if takes_any or key in accepted}


def _count_steps_for_schedulers(original: Optimizer, sharded: Optimizer) -> None:
    """An LR scheduler warns when it steps before its optimizer did: mark the user's optimizer stepped when
    the sharded one steps."""
    step = sharded.step

    def counted_step(*args: Any, **kwargs: Any) -> Any:
        original._opt_called = True  # type: ignore[attr-defined]
        return step(*args, **kwargs)

    sharded.step = counted_step  # type: ignore[method-assign]
