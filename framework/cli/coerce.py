"""Checking a config value against the annotation of the argument it is for.

The result is plain data again (numbers, strings, booleans, None, lists, mappings, ``class_path``
sections), so a checked config prints as YAML and reads back to the same thing; an Enum is kept as
its member's name and a callable as its import path. Text from the command line
(:class:`~framework.cli.config.FlagText`) is read as YAML where the annotation allows more than a
string.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import enum
import inspect
import os
import types
import typing
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from framework.cli.class_names import class_path_of, find, names_a_class, short_names
from framework.cli.config import FlagText, is_class_node
from framework.cli.errors import ConfigError, Key, placed
from framework.cli.yaml_files import parse_text

NONE_TEXTS = ("null", "None", "none", "~")
SEQUENCES = (list, tuple, set, frozenset, collections.abc.Sequence, collections.abc.MutableSequence,
             collections.abc.Iterable, collections.abc.Collection, collections.abc.Set)
MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
ResolveClass = Callable[[dict, type, Key], dict]


class Mismatch(Exception):
    """The value does not fit the annotation (raised inside, turned into a :class:`ConfigError` at the key)."""


def union_members(annotation: Any) -> tuple:
    """The members of ``A | B`` (or ``Optional[A]``); ``(annotation,)`` for anything else."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def is_callable_annotation(annotation: Any) -> bool:
    return annotation is collections.abc.Callable or typing.get_origin(annotation) is collections.abc.Callable


def describe_type(annotation: Any) -> str:
    """``int | None``, ``list[float]``, ``one of 'min', 'max'``: an annotation as an error message says it."""
    if annotation is type(None) or annotation is None:
        return "None"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(describe_type(arg) for arg in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(arg) for arg in args)
    if inspect.isclass(annotation) and issubclass(annotation, enum.Enum):
        return f"{annotation.__name__} (one of {', '.join(annotation.__members__)})"
    if is_callable_annotation(annotation):
        return "a callable's import path (package.module.function)"
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join('...' if arg is Ellipsis else describe_type(arg) for arg in args)}]"
    if inspect.isclass(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def check(value: Any, annotation: Any, key: Key, resolve_class: ResolveClass) -> Any:
    """``value`` as plain data of the type ``annotation`` asks for; raises :class:`Mismatch` where it cannot be.

    ``resolve_class(node, base, key)`` checks a ``class_path`` section that must name a subclass of ``base``.
    """
    if annotation in (inspect.Parameter.empty, Any, object):
        return _untyped(value, key, resolve_class)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return _union(value, args, key, resolve_class)
    if origin is typing.Literal:
        return _literal(value, args)
    if annotation is type(None) or annotation is None:
        if _is_none(value):
            return None
        raise Mismatch
    if annotation in _SCALARS:
        return _SCALARS[annotation](value)
    if annotation in SEQUENCES or origin in SEQUENCES:
        return _sequence(value, annotation, origin, args, key, resolve_class)
    if annotation in MAPPINGS or origin in MAPPINGS:
        return _mapping(value, args, key, resolve_class)
    if is_callable_annotation(annotation):
        return _import_path(value)
    if inspect.isclass(annotation) and issubclass(annotation, enum.Enum):
        return _enum_member(value, annotation)
    if inspect.isclass(annotation) and issubclass(annotation, (PurePath, os.PathLike)):
        return _text(value)
    if inspect.isclass(annotation):
        return _class_section(value, annotation, key, resolve_class)
    return _untyped(value, key, resolve_class)  # TypeVar and the like: taken as given


def _untyped(value: Any, key: Key, resolve_class: ResolveClass) -> Any:
    if isinstance(value, FlagText):
        value = parse_text(value)
    if is_class_node(value):
        return resolve_class(value, object, key)
    if isinstance(value, list):
        return [_untyped(item, key + (index,), resolve_class) for index, item in enumerate(value)]
    if isinstance(value, dict):
        return {name: _untyped(item, key + (name,), resolve_class) for name, item in value.items()}
    return value


def _is_none(value: Any) -> bool:
    return value is None or (isinstance(value, FlagText) and value in NONE_TEXTS)


def _bool(value: Any) -> bool:
    if isinstance(value, FlagText):
        value = parse_text(value)
    if isinstance(value, bool):
        return value
    raise Mismatch


def _int(value: Any) -> int:
    if isinstance(value, FlagText):
        value = parse_text(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise Mismatch


def _float(value: Any) -> float:
    if isinstance(value, FlagText):
        value = parse_text(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise Mismatch


def _text(value: Any) -> str:
    if isinstance(value, str):
        return str(value)
    raise Mismatch


_SCALARS: dict[Any, Callable[[Any], Any]] = {bool: _bool, int: _int, float: _float, str: _text}


def _literal(value: Any, choices: tuple) -> Any:
    candidates = [str(value), parse_text(value)] if isinstance(value, FlagText) else [value]
    for candidate in candidates:
        for choice in choices:
            if candidate == choice and type(candidate) is type(choice):
                return choice
    raise Mismatch


def _enum_member(value: Any, kind: type[enum.Enum]) -> str:
    """An Enum argument is given by its member's name (``BLUE``), or by the member's value."""
    if isinstance(value, str) and str(value) in kind.__members__:
        return str(value)
    for candidate in ([parse_text(value), str(value)] if isinstance(value, FlagText) else [value]):
        for member in kind:
            if member.value == candidate and type(member.value) is type(candidate):
                return member.name
    raise Mismatch


def _import_path(value: Any) -> str:
    """A callable argument is given by its import path (``torch.tanh``); it must import to a callable."""
    if isinstance(value, str) and callable(find(value)):
        return str(value)
    raise Mismatch


def _class_section(value: Any, base: type, key: Key, resolve_class: ResolveClass) -> dict:
    """A class_path section; ``CSVLogger`` or ``mypackage.MyCallback`` alone names a class with no arguments.
    A dataclass is given (and printed) as the plain mapping of its fields."""
    if isinstance(value, FlagText):
        value = parse_text(value)
    if names_a_class(value):
        value = {"class_path": value}
    elif dataclasses.is_dataclass(base) and isinstance(value, dict) and not is_class_node(value):
        section = {"class_path": class_path_of(base), "init_args": value}
        return resolve_class(section, base, key)["init_args"]
    if is_class_node(value):
        return resolve_class(value, base, key)
    raise Mismatch


def _union(value: Any, members: tuple, key: Key, resolve_class: ResolveClass) -> Any:
    if type(None) in members and _is_none(value):
        return None
    for member in _union_order(value, members):
        try:
            return check(value, member, key, resolve_class)
        except Mismatch:
            continue
        except ConfigError:
            if str in members and isinstance(value, str):
                continue  # a name that imports nothing fitting: the str member takes it as it is
            raise
    raise Mismatch


def _union_order(value: Any, members: tuple) -> list:
    """The members to try, in order, so a value reads the same from a file and from a flag.

    A value of one member's own type keeps it (``3`` stays an int for ``float | int``; text is read as
    YAML first). Where ``str`` is a member, text stays text unless it names a class of a class member
    (``SingleDeviceStrategy`` for ``str | Strategy``): an Enum member's name, a callable's path or a
    path would print as the same text and could not be told apart from the string when building.
    """
    parsed = parse_text(value) if isinstance(value, FlagText) else value
    last = [str] if str in members else []
    if last and isinstance(parsed, str):
        classes = [member for member in members if inspect.isclass(member) and member not in _SCALARS
                   and not issubclass(member, (enum.Enum, PurePath, os.PathLike))]
        return (classes if names_a_class(parsed) else []) + last
    exact = [member for member in members if inspect.isclass(member) and type(parsed) is member]
    return exact + [member for member in members if member not in exact and member is not str] + last


def _sequence(value: Any, annotation: Any, origin: Any, args: tuple, key: Key, resolve_class: ResolveClass) -> list:
    if isinstance(value, FlagText):
        value = parse_text(value)
    if not isinstance(value, (list, tuple)):
        raise Mismatch
    if not args:
        return [_untyped(item, key + (index,), resolve_class) for index, item in enumerate(value)]
    if (origin or annotation) is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if len(value) != len(args):
            raise Mismatch
        pairs = enumerate(zip(value, args, strict=True))
        return [check(item, arg, key + (index,), resolve_class) for index, (item, arg) in pairs]
    return [check(item, args[0], key + (index,), resolve_class) for index, item in enumerate(value)]


def _mapping(value: Any, args: tuple, key: Key, resolve_class: ResolveClass) -> dict:
    if isinstance(value, FlagText):
        value = parse_text(value)
    if not isinstance(value, dict) or is_class_node(value):
        raise Mismatch
    item_type = args[1] if len(args) == 2 else Any
    return {name: check(item, item_type, key + (name,), resolve_class) for name, item in value.items()}


def mismatch_error(key: Key, value: Any, annotation: Any, origin: str | None) -> ConfigError:
    """The error for a value that does not fit its argument: the key, the value, the type and the source."""
    shown = repr(str(value)) if isinstance(value, FlagText) else f"{value!r} ({type(value).__name__})"
    hint = ""
    if isinstance(value, str) and "." not in value:
        near = difflib.get_close_matches(str(value), list(short_names()), n=2)
        hint = f" Did you mean {' or '.join(near)}?" if near else ""
    return ConfigError(f"{placed(key, origin)}: expected {describe_type(annotation)}, got {shown}.{hint}")
