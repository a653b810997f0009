"""What ``Runtime.setup`` and ``setup_dataloaders`` hand back: the user's objects, made to follow the Runtime.

``RuntimeModule`` runs forward under the precision's autocast (through DDP's forward when the
strategy wraps the module); ``RuntimeOptimizer`` steps through the precision (fp16 loss
scaling); ``RuntimeDataLoader`` moves each batch to the device. Each stands in for the
object it wraps: attributes, ``state_dict`` and ``isinstance`` checks reach the original.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from framework.nested import map_tensors

_SYNCED_BY_DEFAULT = frozenset({"training_step"})


class RuntimeModule(nn.Module):
    """The set-up module: call it like the original; its parameters and state dict are the original's.

    Example::

        model, optimizer = runtime.setup(model, optimizer)
        loss = model(x).sum()          # autocast as the precision asks, DDP gradient sync set up
        model.module                   # the original module
    """

    def __init__(self, forward_module: nn.Module, original: nn.Module, runtime: Any,
                 float_outputs: bool = False) -> None:
        super().__init__()
        self._forward_module = forward_module
        self.__dict__["_original"] = original
        self.__dict__["_runtime"] = runtime
        self.__dict__["_synced_methods"] = set(_SYNCED_BY_DEFAULT)
        self.__dict__["_finish"] = _in_float32 if float_outputs else None

    @property
    def module(self) -> nn.Module:
        """The module given to ``setup``."""
        return self.__dict__["_original"]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        runtime = self.__dict__["_runtime"]
        args, kwargs = runtime.precision.convert_input((args, kwargs))
        with runtime.precision.autocast():
            output = self._forward_module(*args, **kwargs)
        finish = self.__dict__["_finish"]
        return output if finish is None else finish(output)

    def mark_forward_method(self, method: str | Callable[..., Any]) -> None:
        """Make calls of ``method`` (a method of the original module) run through the wrapper's forward.

        ``training_step`` is marked already. A method that computes a loss must be marked, or
        DDP does not sync the gradients of what it ran.
        """
        name = method if isinstance(method, str) else method.__name__
        if not callable(getattr(self.module, name, None)):
            raise AttributeError(f"{type(self.module).__name__} has no method {name!r} to mark.")
        self.__dict__["_synced_methods"].add(name)

    def no_sync(self) -> contextlib.AbstractContextManager:
        """Backward passes inside the block leave the gradients unreduced, to accumulate locally (DDP's
        ``no_sync``); on one process nothing changes.

        Example::

            with model.no_sync():
                runtime.backward(model(x).sum())
        """
        return self.__dict__["_runtime"].no_backward_sync(self)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.module.load_state_dict(state_dict, strict=strict, assign=assign)

    def __getattr__(self, name: str) -> Any:
        if name in self.__dict__["_synced_methods"]:
            return self._synced_method(name)
        try:
            return super().__getattr__(name)  # _forward_module
        except AttributeError:
            return getattr(self.__dict__["_original"], name)

    def _synced_method(self, name: str) -> Callable[..., Any]:
        """The original's method ``name`` run the way forward is (through the wrapper, under autocast), compiled
        where ``compile=`` asked; made once per name."""
        made = self.__dict__.setdefault("_made_methods", {})
        if name not in made:
            runtime = self.__dict__["_runtime"]
            compiler = runtime.compiler
            compiled = compiler.method(self.__dict__["_original"], name) if compiler is not None else None
            step = runtime.strategy.step_function(self._forward_module, name, synced=True, method=compiled)

            finish = self.__dict__["_finish"]

            def call(*args: Any, **kwargs: Any) -> Any:  # as forward: inputs converted, under autocast
                args, kwargs = runtime.precision.convert_input((args, kwargs))
                with runtime.precision.autocast():
                    output = step(*args, **kwargs)
                return output if finish is None else finish(output)

            made[name] = call
        return made[name]

    def __getitem__(self, index: Any) -> Any:
        return self.module[index]

    def __len__(self) -> int:
        return len(self.module)


class RuntimeOptimizer:
    """The set-up optimizer: ``step()`` goes through the precision (and strategy); all else is the original's.

    It is an instance of the original optimizer's class too, so LR schedulers accept it.
    """

    def __init__(self, optimizer: Optimizer, runtime: Any) -> None:
        # Share the original's attributes (hooks, defaults), so both stay one optimizer; state and param_groups
        # are read through, since load_state_dict gives the original new ones.
        self.__dict__ = {key: value for key, value in optimizer.__dict__.items()
                         if key not in ("step", "state_dict", "state", "param_groups")}
        prefix = type(self).__name__.removesuffix("Optimizer")  # RuntimeAdamW, AcceleratedAdamW ...
        self.__class__ = type(f"{prefix}{type(optimizer).__name__}", (type(self), type(optimizer)), {})
        self._optimizer = optimizer
        self._runtime = runtime

    @property
    def optimizer(self) -> Optimizer:
        """The optimizer given to ``setup``."""
        return self._optimizer

    @property
    def state(self) -> Any:
        """The original's per-parameter state (after a ``load_state_dict`` too)."""
        return self._optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self._optimizer.state = value

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The original's parameter groups (the ones LR schedulers change), after a ``load_state_dict`` too."""
        return self._optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self._optimizer.param_groups = value

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """Step through the precision: with fp16, skipped when the gradients hold inf/nan."""
        return self._runtime.strategy.optimizer_step(self._optimizer, closure, **kwargs)

    def state_dict(self) -> dict[str, Any]:
        return self._optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._optimizer.load_state_dict(state_dict)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._optimizer.zero_grad(set_to_none=set_to_none)


class RuntimeDataLoader:
    """The set-up loader: yields the original's batches moved to the device; tells its sampler the epoch.

    Example::

        loader = runtime.setup_dataloaders(DataLoader(dataset, batch_size=32, shuffle=True))
        for epoch in range(3):
            for x, y in loader:        # on the device; a new shuffle every epoch, the same on every rank
                ...
    """

    def __init__(self, loader: Any, device: torch.device | None, to_device: Callable[[Any], Any]) -> None:
        self._loader = loader
        self._to_device = to_device if device is not None else None
        self._passes = 0

    @property
    def loader(self) -> Any:
        """The loader given to ``setup_dataloaders`` (with its sampler replaced when sharded)."""
        return self._loader

    def __iter__(self) -> Iterator[Any]:
        sampler = getattr(self._loader, "sampler", None)
        if callable(getattr(sampler, "set_epoch", None)):
            sampler.set_epoch(self._passes)
        self._passes += 1
        if self._to_device is None:
            yield from self._loader
            return
        move = self._to_device
        for batch in self._loader:
            yield move(batch)

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        if name == "_loader":
            raise AttributeError(name)
        return getattr(self._loader, name)


def _in_float32(output: Any) -> Any:
    """``output`` with its half-precision tensors (what autocast computed) in float32."""
    return map_tensors(output, lambda tensor: tensor.float() if tensor.dtype in _HALF else tensor)


_HALF = (torch.float16, torch.bfloat16)


def original_module(module: nn.Module) -> nn.Module:
    """The user's module behind a ``RuntimeModule`` (any other module as it is)."""
    return module.module if isinstance(module, RuntimeModule) else module


def forward_module(module: nn.Module) -> nn.Module:
    """What a ``RuntimeModule`` runs (the DDP wrapper, for one); any other module as it is."""
    return module._forward_module if isinstance(module, RuntimeModule) else module


def original_optimizer(optimizer: Any) -> Any:
    """The optimizer behind a ``RuntimeOptimizer`` (any other optimizer as it is)."""
    return optimizer.optimizer if isinstance(optimizer, RuntimeOptimizer) else optimizer
