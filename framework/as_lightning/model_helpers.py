"""Lightning's ``utilities.model_helpers``: whether a Module, DataModule or Callback overrides a hook.

Example::

    is_overridden("validation_step", model)        # True when model's class defines its own
"""

from __future__ import annotations

from framework.callbacks.base import Callback
from framework.datamodule import DataModule
from framework.hooks import defines
from framework.module import Module

__all__ = ["is_overridden"]


def is_overridden(method_name: str, instance: object | None = None, parent: type | None = None) -> bool:
    """Whether ``instance`` has its own ``method_name``, not ``parent``'s (default: the Module, DataModule or
    Callback base it is an instance of). A wrapper of ``parent``'s method (``functools.wraps``) does not count."""
    if instance is None:
        return False
    if parent is None:
        parent = next((base for base in (Module, DataModule, Callback) if isinstance(instance, base)), None)
        if parent is None:
            raise ValueError(f"is_overridden({method_name!r}, {type(instance).__name__} instance): give parent=, "
                             "the class to compare with; only Modules, DataModules and Callbacks have a default.")
    if getattr(parent, method_name, None) is None:
        raise ValueError(f"is_overridden: {parent.__name__} has no method {method_name!r} to override.")
    return defines(instance, parent, method_name)
