"""Accelerate's big-model helpers: building a model without memory for its weights works here
(``init_empty_weights``, ``init_on_device``); splitting one model over several devices or offloading it for
inference does not, and says so when called."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from framework.accelerate.utils.modeling import load_checkpoint_in_model
from framework.accelerate.utils.unsupported import refused_function

__all__ = ["cpu_offload", "cpu_offload_with_hook", "disk_offload", "dispatch_model", "init_empty_weights",
           "init_on_device", "load_checkpoint_and_dispatch", "load_checkpoint_in_model",
           "attach_layerwise_casting_hooks"]

_DISPATCH = ("the framework does not split one model over several devices or offload it for inference; use "
             "Accelerate itself for big-model inference")


@contextlib.contextmanager
def init_on_device(device: torch.device | str, include_buffers: bool | None = None) -> Iterator[None]:
    """Create the parameters of modules built in the block on ``device`` (their buffers too with
    ``include_buffers``).

    Example::

        with init_on_device("meta"):
            model = Transformer(config)      # no memory for its weights
    """
    if include_buffers:
        with torch.device(device):
            yield
        return
    register = nn.Module.register_parameter

    def register_on_device(module: nn.Module, name: str, parameter: nn.Parameter | None) -> None:
        register(module, name, parameter)
        if parameter is not None:
            moved = module._parameters[name].to(device)
            module._parameters[name] = type(parameter)(moved, requires_grad=parameter.requires_grad)

    nn.Module.register_parameter = register_on_device  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]


def init_empty_weights(include_buffers: bool | None = None) -> contextlib.AbstractContextManager:
    """Build models in the block on the meta device: shapes and dtypes without memory (buffers too with
    ``include_buffers``); fill them later with ``load_state_dict(..., assign=True)`` or ``to_empty``."""
    return init_on_device(torch.device("meta"), include_buffers=bool(include_buffers))


cpu_offload = refused_function("cpu_offload", _DISPATCH)
cpu_offload_with_hook = refused_function("cpu_offload_with_hook", _DISPATCH)
disk_offload = refused_function("disk_offload", _DISPATCH)
dispatch_model = refused_function("dispatch_model", _DISPATCH)
load_checkpoint_and_dispatch = refused_function("load_checkpoint_and_dispatch", _DISPATCH)
attach_layerwise_casting_hooks = refused_function("attach_layerwise_casting_hooks", _DISPATCH)

