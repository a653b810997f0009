"""FSDP2's sharded units as the strategy handles them: found in a model, their gradient sync turned off for
accumulation, their record of forward passes cleared when ranks ran different numbers of them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn


@contextlib.contextmanager
def without_gradient_sync(module: nn.Module) -> Iterator[None]:
    """The FSDP2 ``module`` without its gradient reduce-scatter inside the block (accumulation micro-batches)."""
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)


def forget_forward_passes(root: nn.Module) -> None:
    """Clear FSDP's record of the forward passes since the last backward (what it prefetches by)."""
    if hasattr(root, "reset_iter_state"):
        root.reset_iter_state()
        return
    state = root._get_fsdp_state()  # torch before reset_iter_state: the same two records, cleared by hand
    state._comm_ctx.post_forward_order.clear()
    for unit_state in state._state_ctx.all_states:
        group = getattr(unit_state, "_fsdp_param_group", None)
        if group is not None:
            group._post_forward_indices.clear()


def sharded_units(model: nn.Module) -> list[nn.Module]:
    """The modules of ``model`` that ``fully_shard`` made units of."""
    from torch.distributed.fsdp import FSDPModule

    return [module for module in model.modules() if isinstance(module, FSDPModule)]
