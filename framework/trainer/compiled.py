"""The Module's step methods under ``torch.compile``: from ``Trainer(compile=...)``, or from
``trainer.fit(torch.compile(model))`` as in Lightning (the Module inside is the one trained)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from framework.errors import describe
from framework.module import Module
from framework.runtime.compile import StepCompiler, is_compiled_module


def unwrap_compiled(fn_name: str, model: Any) -> tuple[Any, StepCompiler | None]:
    """``(Module, compiler)`` for what ``torch.compile(module, ...)`` returned, compiling with its options;
    ``(model, None)`` for anything else."""
    if not is_compiled_module(model):
        return model, None
    inner = model._orig_mod
    if not isinstance(inner, Module):
        raise TypeError(
            f"trainer.{fn_name}(model=torch.compile(...)) compiled {describe(inner)}; the model inside must subclass "
            "framework.Module."
        )
    return inner, StepCompiler.from_compiled_module(model)


class CompiledSteps:
    """The step methods of one Module, each compiled once per compiler (the loops record what they ``self.log``:
    ``Module._record_logs_of_compiled_step``).

    Example::

        steps = CompiledSteps()
        steps.use(module, StepCompiler.from_options({}))
        training_step = steps.method("training_step")   # None when nothing is compiled
    """

    def __init__(self) -> None:
        self._module: Module | None = None
        self._compiler: StepCompiler | None = None
        self._made: dict[str, Callable[..., Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for spawned ranks empty: they compile for themselves."""
        return {"_module": None, "_compiler": None, "_made": {}}

    def use(self, module: Module, compiler: StepCompiler | None) -> None:
        """Compile ``module``'s steps with ``compiler`` from now on (None: run them eagerly)."""
        if module is not self._module or compiler is not self._compiler:
            self._module, self._compiler, self._made = module, compiler, {}

    def method(self, name: str) -> Callable[..., Any] | None:
        """The Module's method ``name`` compiled, or None where nothing is compiled."""
        if self._compiler is None or self._module is None:
            return None
        if name not in self._made:
            self._made[name] = self._compiler.method(self._module, name)
        return self._made[name]
