"""What a class's constructor (or a function) takes: its arguments by name and their evaluated annotations."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any


def parameters(cls: type) -> tuple[dict[str, inspect.Parameter], dict[str, Any], bool]:
    """``cls``'s constructor arguments by name, their annotations, and whether it takes ``**kwargs`` too."""
    signature = inspect.signature(cls.__init__)
    named = {name: parameter for name, parameter in list(signature.parameters.items())[1:]
             if parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)}
    takes_more = any(parameter.kind is parameter.VAR_KEYWORD for parameter in signature.parameters.values())
    return named, annotations_of(cls.__init__, named), takes_more


def annotations_of(function: Callable, named: dict[str, inspect.Parameter]) -> dict[str, Any]:
    """The annotations of ``function``'s arguments, evaluated; one that cannot be evaluated checks nothing."""
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # a name only imported under TYPE_CHECKING: evaluate the arguments one by one
        hints = {}
        for name, parameter in named.items():
            try:
                hints[name] = typing.get_type_hints(_with_annotation(parameter.annotation), function.__globals__)["x"]
            except Exception:
                hints[name] = Any
    return {name: hints.get(name, parameter.annotation) for name, parameter in named.items()}


def _with_annotation(annotation: Any) -> Callable:
    def holder(x):  # noqa: ANN001 - only carries the annotation
        pass

    holder.__annotations__ = {"x": annotation}
    return holder
