"""Checking a config value against the annotation of the argument it is for, and giving it that type.

The result is plain data again (numbers, strings, booleans, None, lists, mappings, ``class_path``
sections), so a checked config prints as YAML and reads back to the same thing. Text from the
command line (:class:`~framework.cli.config.FlagText`) is read as YAML where the annotation allows
more than a string. YAML 1.1 reads ``1e-3`` as a string; a ``float`` argument takes it as the number.
"""

from __future__ import annotations

import collections.abc
import inspect
import os
import re
import types
import typing
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

import yaml

from framework.cli.config import ConfigError, FlagText, Key
from framework.cli.short_names import short_names

NONE_TEXTS = ("null", "None", "none", "~")
_CLASS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_SEQUENCES = (list, tuple, set, frozenset, collections.abc.Sequence, collections.abc.MutableSequence,
              collections.abc.Iterable, collections.abc.Collection, collections.abc.Set)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


class Mismatch(Exception):
    """The value does not fit the annotation (raised inside, turned into a :class:`ConfigError` at the key)."""


def is_class_node(value: Any) -> bool:
    """A ``{class_path: ..., init_args: ...}`` section."""
    return isinstance(value, dict) and "class_path" in value


def parse_text(text: str) -> Any:
    """Command-line text read as YAML (``3`` a number, ``[1, 2]`` a list), else the text itself."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return str(text)


def describe_type(annotation: Any) -> str:
    """``int | None``, ``list[float]``, ``one of 'min', 'max'``: an annotation as an error message says it."""
    if annotation is type(None) or annotation is None:
        return "None"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(describe_type(arg) for arg in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(arg) for arg in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join('...' if arg is Ellipsis else describe_type(arg) for arg in args)}]"
    if inspect.isclass(annotation):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def check(value: Any, annotation: Any, key: Key, resolve_class: Callable[[dict, type, Key], dict]) -> Any:
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
    if annotation in _SEQUENCES or origin in _SEQUENCES:
        return _sequence(value, annotation, origin, args, key, resolve_class)
    if annotation in _MAPPINGS or origin in _MAPPINGS:
        return _mapping(value, args, key, resolve_class)
    if inspect.isclass(annotation) and issubclass(annotation, (PurePath, os.PathLike)):
        return _text(value)
    if inspect.isclass(annotation):
        return _class_section(value, annotation, key, resolve_class)
    return _untyped(value, key, resolve_class)  # Callable, TypeVar and the like: taken as given


def _untyped(value: Any, key: Key, resolve_class: Callable) -> Any:
    if isinstance(value, FlagText):
        value = parse_text(value)
    if is_class_node(value):
        return resolve_class(value, object, key)
    if isinstance(value, list):
        return [_untyped(item, key + (index,), resolve_class) for index, item in enumerate(value)]
    if isinstance(value, dict):
        return {name: _untyped(item, key + (name,), resolve_class) for name, item in value.items()}
    return value


def _class_section(value: Any, base: type, key: Key, resolve_class: Callable) -> dict:
    """A class_path section; ``CSVLogger`` or ``mypackage.MyCallback`` alone names a class with no arguments."""
    if isinstance(value, FlagText):
        value = parse_text(value)
    if isinstance(value, str) and _CLASS_NAME.fullmatch(value) and ("." in value or value in short_names()):
        value = {"class_path": value}
    if is_class_node(value):
        return resolve_class(value, base, key)
    raise Mismatch


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
    if isinstance(value, bool):
        raise Mismatch
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise Mismatch from None
    raise Mismatch


def _text(value: Any) -> str:
    if isinstance(value, str):
        return str(value)
    raise Mismatch


_SCALARS: dict[Any, Callable[[Any], Any]] = {bool: _bool, int: _int, float: _float, str: _text}


def _literal(value: Any, choices: tuple) -> Any:
    candidates = [value, parse_text(value)] if isinstance(value, FlagText) else [value]
    for candidate in candidates:
        for choice in choices:
            if candidate == choice and type(candidate) is type(choice):
                return choice
    raise Mismatch


def _union(value: Any, members: tuple, key: Key, resolve_class: Callable) -> Any:
    if type(None) in members and _is_none(value):
        return None
    # A value already of one member's type keeps it (1 stays an int for ``float | int``); text from the
    # command line tries the other types before ``str`` (``--x=3`` is 3 for ``int | str``).
    exact = [member for member in members if inspect.isclass(member) and type(value) is member]
    rest = [member for member in members if member is not str and member not in exact]
    order = exact + rest + ([str] if str in members and str not in exact else [])
    for member in order:
        try:
            return check(value, member, key, resolve_class)
        except Mismatch:
            continue
    raise Mismatch


def _sequence(value: Any, annotation: Any, origin: Any, args: tuple, key: Key, resolve_class: Callable) -> list:
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


def _mapping(value: Any, args: tuple, key: Key, resolve_class: Callable) -> dict:
    if isinstance(value, FlagText):
        value = parse_text(value)
    if not isinstance(value, dict) or is_class_node(value):
        raise Mismatch
    item_type = args[1] if len(args) == 2 else Any
    return {name: check(item, item_type, key + (name,), resolve_class) for name, item in value.items()}


def mismatch_error(key: Key, value: Any, annotation: Any, origin: str | None) -> ConfigError:
    """The error for a value that does not fit its argument: the key, the value, the type and the source."""
    where = f" ({origin})" if origin else ""
    shown = str(value) if isinstance(value, FlagText) else repr(value)
    return ConfigError(f"{dotted(key)}{where}: expected {describe_type(annotation)}, got {shown}"
                       f"{'' if isinstance(value, FlagText) else f' ({type(value).__name__})'}.")


def dotted(key: Key) -> str:
    """``trainer.callbacks[0].init_args.monitor``: a key path as one writes it."""
    text = ""
    for part in key:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
