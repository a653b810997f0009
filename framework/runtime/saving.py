"""What ``Runtime.save`` writes for the objects in its ``state``, and how ``Runtime.load`` puts them back.

Modules and optimizers are saved as their state dicts (the user's module, not its DDP or
Runtime wrapper, so the keys have no ``module.`` prefix) and restored in place; plain values
are saved as they are and handed back.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from torch import nn
from torch.optim import Optimizer

from framework.errors import describe
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


class FileMethods:
    """The Runtime's ``save``, ``load`` and ``load_raw``."""

    def save(self, path: str | os.PathLike, state: dict[str, Any], filter: dict[str, Callable] | None = None) -> None:
        """Save ``state`` (written by rank 0); modules and optimizers in it are saved as their ``state_dict()``.

        ``filter`` maps a key of ``state`` to ``fn(name, value) -> bool`` choosing which entries of
        that object's state dict are kept (e.g. only the trainable parameters).

        :param path: the file to write (a local path or an fsspec URL).
        :param state: names mapped to modules, optimizers, objects with ``state_dict`` or plain values.
        :param filter: see above; ``None`` (the default): every entry is kept.
        """
        self.strategy.save_checkpoint(state_dicts(state, self.strategy, filter or {}), os.fspath(path))

    def load(self, path: str | os.PathLike, state: dict[str, Any] | None = None, strict: bool = True, *,
             weights_only: bool | None = None) -> dict[str, Any]:
        """Load a checkpoint into ``state``: objects with ``load_state_dict`` in place, plain values replaced in
        ``state``; returns what the checkpoint holds beyond ``state``'s keys (everything without ``state``).

        ``strict``: a key of ``state`` missing from the checkpoint, or a module key mismatch, raises.
        ``weights_only=False`` also unpickles arbitrary objects (only for files you trust).

        :param path: the checkpoint written by ``save`` (a local path or an fsspec URL).
        :param state: names mapped to the objects to restore; ``None`` (the default): load nothing in place.
        :param strict: see above; default ``True``.
        :param weights_only: ``None`` or ``True`` load tensors and plain data only; ``False`` unpickles anything.
        """
        checkpoint = self.strategy.load_checkpoint(os.fspath(path), weights_only=weights_only)
        self.barrier("load")
        if state is not None:
            restore_into(state, checkpoint, self.strategy, strict, os.fspath(path))
        return checkpoint

    def load_raw(self, path: str | os.PathLike, obj: nn.Module | Optimizer, strict: bool = True, *,
                 weights_only: bool | None = None) -> None:
        """Load a plain state-dict file (``torch.save(model.state_dict(), path)``) into a module or optimizer.

        Example::

            runtime.load_raw("pretrained.pt", model)

        :param path: the state-dict file (a local path or an fsspec URL).
        :param obj: the module (set up or not) or optimizer to load it into.
        :param strict: for a module, every key must match (default ``True``).
        :param weights_only: ``None`` or ``True`` load tensors and plain data only; ``False`` unpickles anything.
        :raises TypeError: where ``obj`` is neither a ``torch.nn.Module`` nor has a ``load_state_dict`` method.
        """
        if not isinstance(obj, nn.Module) and not callable(getattr(obj, "load_state_dict", None)):
            raise TypeError(f"load_raw(obj={describe(obj)}): obj must be a torch.nn.Module or an optimizer.")
        state_dict = self.strategy.load_checkpoint(os.fspath(path), weights_only=weights_only)
        self.barrier("load_raw")
        load_object(obj, state_dict, self.strategy, strict)
