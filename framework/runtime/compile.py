"""``compile=`` and ``fit(torch.compile(model))``: what a step computes runs under ``torch.compile``.

A ``StepCompiler`` compiles functions (the step methods ``training_step`` ...) and a module's
forward, with either the ``torch.compile`` keyword arguments ``compile=`` gave or the context
of a module the user compiled himself. Compiling a step, not only ``forward``, lets the loss
and whatever else the step computes fuse with the model, as in a hand-compiled loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from framework.errors import MisconfigurationError, describe


class CompileError(RuntimeError):
    """``torch.compile`` could not compile or run a step or forward; the cause is chained and named in the message."""


def compile_options(compile: Any) -> dict[str, Any] | None:
    """The ``torch.compile`` keyword arguments ``compile=`` asks for, or None for no compiling."""
    if compile is False or compile is None:
        return None
    if compile is True:
        return {}
    if isinstance(compile, Mapping) and all(isinstance(key, str) for key in compile):
        return dict(compile)
    raise MisconfigurationError(
        f"compile={describe(compile)} is not accepted. Use True, False, or a dict of torch.compile keyword "
        "arguments such as {'mode': 'reduce-overhead'} or {'backend': 'inductor', 'dynamic': False}."
    )


def is_compiled_module(value: Any) -> bool:
    """Whether ``value`` is what ``torch.compile(module)`` returned (an ``OptimizedModule``), without importing
    dynamo where nothing was compiled."""
    return hasattr(value, "_orig_mod") and hasattr(value, "dynamo_ctx") and isinstance(value, nn.Module)


class StepCompiler:
    """Compiles step functions and forwards with one set of ``torch.compile`` options.

    Example::

        compiler = StepCompiler.from_options({"mode": "max-autotune"})
        step = compiler.function(model.training_step, "Classifier.training_step")
        compiler.module(model)    # model's forward compiled in place
    """

    def __init__(self, options: dict[str, Any] | None = None, context: Any = None) -> None:
        self._options = options or {}
        self._context = context  # a torch.compile'd module's dynamo context, which compiles with its options
        # how the options are shown in errors
        self.described = "torch.compile(model, ...)" if context is not None else f"compile={self._options!r}"

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> StepCompiler:
        """``torch.compile(fn, **options)``; options torch refuses raise ``MisconfigurationError`` here."""
        try:
            torch.compile(_nothing, **options)  # torch checks mode and backend when called, not when run
        except Exception as error:
            raise MisconfigurationError(f"compile={options!r}: torch.compile refused it: {error}") from error
        return cls(options=options)

    @classmethod
    def from_compiled_module(cls, compiled: nn.Module) -> StepCompiler:
        """The options of ``compiled = torch.compile(module, ...)``: its dynamo context compiles other functions
        as it compiles the module's forward (what Lightning does for ``fit(torch.compile(model))``)."""
        return cls(context=compiled.dynamo_ctx)

    def function(self, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        """``fn`` compiled; compiling happens at the first call, and a failure then raises ``CompileError``
        naming ``name`` and the cause."""
        compiled = self._context(fn) if self._context is not None else torch.compile(fn, **self._options)
        return _naming_failures(compiled, name, self.described)

    def method(self, owner: Any, name: str) -> Callable[..., Any]:
        """``owner``'s method ``name`` compiled (failures name ``Owner.name``)."""
        return self.function(getattr(owner, name), f"{type(owner).__name__}.{name}")

    def module(self, module: nn.Module) -> nn.Module:
        """Compile ``module``'s forward in place and return it.

        In place, so ``state_dict()`` keys stay those of the eager module (no ``_orig_mod.``
        prefix) and every reference to the module, the Trainer's and the user's, runs compiled.
        A module compiled already is left as it is. Inside a compiled step the forward is
        traced as part of the step (one graph), not called as a graph of its own.
        """
        if getattr(module, "_compiled_call_impl", None) is not None:
            return module
        compiled = self.function(module._call_impl, f"{type(module).__name__}.forward")
        eager = module._call_impl

        def call(*args: Any, **kwargs: Any) -> Any:
            if torch.compiler.is_compiling():
                return eager(*args, **kwargs)
            return compiled(*args, **kwargs)

        module._compiled_call_impl = call
        return module


def _nothing() -> None:
    """What ``from_options`` hands torch.compile to have the options checked."""


def _naming_failures(compiled: Callable[..., Any], name: str, described: str) -> Callable[..., Any]:
    from torch._dynamo.exc import TorchDynamoException

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return compiled(*args, **kwargs)
        except TorchDynamoException as error:
            raise CompileError(
                f"torch.compile failed on {name}: {_root_cause(error)}. Run once without compiling to see whether "
                f"the eager model works, or compile with backend='eager' to rule out the compiler backend "
                f"({described} was used)."
            ) from error

    return call


def _root_cause(error: BaseException) -> str:
    """``Type: first line`` of the exception that made torch.compile fail.

    Dynamo wraps the real error in its own exceptions (sometimes raised ``from None``), so the
    chain is followed through causes and contexts to the first exception that is not dynamo's.
    """
    from torch._dynamo.exc import TorchDynamoException

    seen = {id(error)}
    while isinstance(error, TorchDynamoException):
        inner = getattr(error, "inner_exception", None) or error.__cause__ or error.__context__
        if inner is None or id(inner) in seen:
            break
        seen.add(id(inner))
        error = inner
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
