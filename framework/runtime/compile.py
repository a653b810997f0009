"""``compile=``: ``torch.compile`` applied to the set-up module, in place, once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from framework.errors import MisconfigurationError, describe


class CompileError(RuntimeError):
    """``torch.compile`` could not compile or run the module; the cause is chained and named in the message."""


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


def compile_module(module: nn.Module, options: dict[str, Any]) -> nn.Module:
    """Compile ``module``'s forward in place (``nn.Module.compile``) and return it.

    In place, so ``state_dict()`` keys stay those of the eager module (no ``_orig_mod.``
    prefix) and every reference to the module, the Trainer's and the user's, runs compiled.
    A module compiled already is left as it is. Compiling happens at the first call; a
    failure then raises ``CompileError`` naming the module and the cause.
    """
    if getattr(module, "_compiled_call_impl", None) is not None:
        return module
    import torch

    try:
        compiled = torch.compile(module._call_impl, **options)
    except Exception as error:  # bad options: torch.compile checks mode and backend eagerly
        raise MisconfigurationError(f"compile={options!r}: torch.compile refused it: {error}") from error
    module._compiled_call_impl = _naming_failures(compiled, module)
    return module


def _naming_failures(compiled: Callable[..., Any], module: nn.Module) -> Callable[..., Any]:
    from torch._dynamo.exc import TorchDynamoException

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return compiled(*args, **kwargs)
        except TorchDynamoException as error:
            raise CompileError(
                f"torch.compile failed on {type(module).__name__}.forward: {_root_cause(error)}. "
                "Run once without compile= to see whether the eager model works, or pass "
                "compile={'backend': 'eager'} to rule out the compiler backend."
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
