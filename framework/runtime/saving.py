"""What ``Runtime.save`` writes for the objects in its ``state``, and how ``Runtime.load`` puts them back.

Modules and optimizers are saved as their state dicts (the user's module, not its DDP or
Runtime wrapper, so the keys have no ``module.`` prefix) and restored in place; plain values
are saved as they are and handed back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn
from torch.optim import Optimizer

from framework.runtime.wrappers import forward_module, original_optimizer


def state_dicts(state: dict[str, Any], strategy: Any, filters: dict[str, Callable]) -> dict[str, Any]:
    """``state`` with modules and optimizers replaced by their state dicts, ``filters[key](name, value)`` applied."""
    converted = {}
    for key, value in state.items():
        if isinstance(value, nn.Module):
            value = strategy.module_state_dict(forward_module(value))
        elif isinstance(value, Optimizer):
            value = strategy.optimizer_state(original_optimizer(value))
        elif callable(getattr(value, "state_dict", None)):
            value = value.state_dict()
        if key in filters:
            keep = filters[key]
            value = {name: entry for name, entry in value.items() if keep(name, entry)}
        converted[key] = value
    return converted


def restore_into(state: dict[str, Any], checkpoint: dict[str, Any], strategy: Any, strict: bool, path: str) -> None:
    """Load ``checkpoint``'s entries into ``state``'s objects in place (plain values replace ``state``'s).

    The entries used are removed from ``checkpoint``. ``strict``: a key of ``state`` missing
    from the checkpoint, or a module's key mismatch, raises.
    """
    missing = [key for key in state if key not in checkpoint]
    if missing and strict:
        raise KeyError(f"The checkpoint {path} has no entries {missing} that state= asks for; it holds "
                       f"{sorted(checkpoint)}. Pass strict=False to load the rest.")
    for key, target in state.items():
        if key not in checkpoint:
            continue
        value = checkpoint.pop(key)
        if isinstance(target, nn.Module) or callable(getattr(target, "load_state_dict", None)):
            load_object(target, value, strategy, strict)
        else:
            state[key] = value


def load_object(target: Any, state_dict: dict[str, Any], strategy: Any, strict: bool) -> None:
    """Load ``state_dict`` into a module (``strict`` key matching) or an optimizer, in place."""
    if isinstance(target, nn.Module):
        strategy.load_module_state(forward_module(target), state_dict, strict=strict)
    elif isinstance(target, Optimizer):
        strategy.load_optimizer_state(original_optimizer(target), state_dict)
    else:
        target.load_state_dict(state_dict)
