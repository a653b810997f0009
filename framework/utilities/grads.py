"""``grad_norm``: the norm of each parameter's gradient and of all of them, to log in ``on_before_optimizer_step``."""

from __future__ import annotations

import torch
from torch import nn

from framework.errors import MisconfigurationError, describe


def grad_norm(module: nn.Module, norm_type: float | int | str, group_separator: str = "/") -> dict[str, torch.Tensor]:
    """``{"grad_2.0_norm/<name>": norm, ..., "grad_2.0_norm_total": norm}`` over the parameters that have a gradient.

    The norms stay tensors on the gradients' device, so logging them waits for nothing.

    Example::

        def on_before_optimizer_step(self, optimizer):
            self.log_dict(grad_norm(self, norm_type=2))

    :raises MisconfigurationError: where ``norm_type`` is neither a positive number nor "inf".
    """
    try:
        order = float(norm_type)
    except (TypeError, ValueError):
        order = -1.0
    if not order > 0:
        raise MisconfigurationError(f"grad_norm(norm_type={describe(norm_type)}): accepted is a positive number or "
                                    "'inf' (the largest absolute value).")
    norms = {f"grad_{order}_norm{group_separator}{name}": torch.linalg.vector_norm(p.grad.detach(), order)
             for name, p in module.named_parameters() if p.grad is not None}
    if norms:
        total = torch.linalg.vector_norm(torch.stack([n.to(torch.float32) for n in norms.values()]), order)
        norms[f"grad_{order}_norm_total"] = total
    return norms
