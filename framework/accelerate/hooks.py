"""Accelerate's module hooks: code run around a module's forward (``ModelHook``, ``SequentialHook``,
``add_hook_to_module``, ``remove_hook_from_module``). The hooks that move weights between devices for big-model
inference (``AlignDevicesHook`` and the ``attach_*`` helpers) are refused when used."""

from __future__ import annotations

import functools
from typing import Any

from torch import nn

from framework.accelerate.utils.unsupported import refused_class, refused_function

_DISPATCH = ("the framework does not move weights between devices for inference; use Accelerate itself for "
             "big-model inference")


class ModelHook:
    """Code run around a module's forward once ``add_hook_to_module`` attached it: ``pre_forward`` may change the
    inputs, ``post_forward`` the output; ``init_hook``/``detach_hook`` run when it is attached and removed.

    Example::

        class Doubling(ModelHook):
            def post_forward(self, module, output):
                return output * 2

        add_hook_to_module(layer, Doubling())
    """

    no_grad = False

    def init_hook(self, module: nn.Module) -> nn.Module:
        """Called when the hook is attached; returns the module."""
        return module

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        """The forward's arguments, possibly changed."""
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        """The forward's output, possibly changed."""
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        """Called when the hook is removed; returns the module."""
        return module


class SequentialHook(ModelHook):
    """Several hooks run in order (``post_forward`` in the same order)."""

    def __init__(self, *hooks: ModelHook) -> None:
        self.hooks = hooks

    def init_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.init_hook(module)
        return module

    def pre_forward(self, module: nn.Module, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
        for hook in self.hooks:
            args, kwargs = hook.pre_forward(module, *args, **kwargs)
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        for hook in self.hooks:
            output = hook.post_forward(module, output)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.detach_hook(module)
        return module


def add_hook_to_module(module: nn.Module, hook: ModelHook, append: bool = False) -> nn.Module:
    """Run ``hook`` around ``module``'s forward (after a hook already there with ``append``, else instead of it);
    returns the module."""
    existing = getattr(module, "_hf_hook", None)
    if existing is not None and append:
        hook = SequentialHook(existing, hook)
    if existing is not None:
        module.forward = module._old_forward
        del module._old_forward
    module = hook.init_hook(module)
    module._hf_hook = hook
    original = module.forward
    module._old_forward = original

    @functools.wraps(original)
    def forward(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = module._hf_hook.pre_forward(module, *args, **kwargs)
        return module._hf_hook.post_forward(module, original(*args, **kwargs))

    module.forward = forward
    return module


def remove_hook_from_module(module: nn.Module, recurse: bool = False) -> nn.Module:
    """Take the hook off ``module`` (and its submodules with ``recurse``); returns the module."""
    hook = getattr(module, "_hf_hook", None)
    if hook is not None:
        hook.detach_hook(module)
        module.forward = module._old_forward
        del module._hf_hook, module._old_forward
    if recurse:
        for child in module.children():
            remove_hook_from_module(child, recurse=True)
    return module


def remove_hook_from_submodules(module: nn.Module) -> None:
    """Take the hooks off every submodule of ``module`` (``module``'s own stays)."""
    for child in module.children():
        remove_hook_from_module(child, recurse=True)


AlignDevicesHook = refused_class("AlignDevicesHook", _DISPATCH)
LayerwiseCastingHook = refused_class("LayerwiseCastingHook", _DISPATCH)
attach_execution_device_hook = refused_function("attach_execution_device_hook", _DISPATCH)
attach_align_device_hook = refused_function("attach_align_device_hook", _DISPATCH)
attach_align_device_hook_on_blocks = refused_function("attach_align_device_hook_on_blocks", _DISPATCH)
