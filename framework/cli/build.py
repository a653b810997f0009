"""Making the objects a resolved config describes: each ``class_path`` section an instance of its class.

The values are already checked (:mod:`framework.cli.classes`); here each is given the Python type its
argument's annotation names: a tuple or a set for a list, an Enum member for its name, the function
for a callable's import path, a ``Path`` for a string.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import os
import typing
from pathlib import Path, PurePath
from typing import Any

from framework.cli.class_names import find
from framework.cli.classes import import_class
from framework.cli.coerce import MAPPINGS, SEQUENCES, is_callable_annotation, union_members
from framework.cli.config import is_class_node
from framework.cli.signatures import parameters


def instantiate(value: Any, annotation: Any = Any) -> Any:
    """The object ``value`` (resolved plain data) stands for, as an argument annotated ``annotation``."""
    if is_class_node(value):
        return make(import_class(value["class_path"], (), None), value["init_args"])
    members = union_members(annotation)
    if isinstance(value, list):
        return _collection(value, members)
    if isinstance(value, dict):
        return _mapping(value, members)
    if isinstance(value, str) and str not in members:
        return _from_text(value, members)
    return value


def make(cls: type, init_args: dict) -> Any:
    """``cls(**init_args)``, each argument given the type its annotation names."""
    _, annotations, _ = parameters(cls)
    return cls(**{name: instantiate(item, annotations.get(name, Any)) for name, item in init_args.items()})


def _collection(value: list, members: tuple) -> Any:
    for member in members:
        kind = typing.get_origin(member) or member
        if kind not in SEQUENCES:
            continue
        args = typing.get_args(member)
        if kind is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            return tuple(instantiate(item, arg) for item, arg in zip(value, args, strict=True))
        items = [instantiate(item, args[0] if args else Any) for item in value]
        if kind is tuple:
            return tuple(items)
        if kind in (set, frozenset, collections.abc.Set):
            return frozenset(items) if kind is frozenset else set(items)
        return items
    return [instantiate(item) for item in value]


def _mapping(value: dict, members: tuple) -> Any:
    for member in members:
        if dataclasses.is_dataclass(member):
            return make(member, value)
        if (typing.get_origin(member) or member) in MAPPINGS:
            args = typing.get_args(member)
            return {name: instantiate(item, args[1] if len(args) == 2 else Any) for name, item in value.items()}
    return {name: instantiate(item) for name, item in value.items()}


def _from_text(value: str, members: tuple) -> Any:
    for member in members:
        if inspect.isclass(member) and issubclass(member, enum.Enum) and value in member.__members__:
            return member[value]
        if is_callable_annotation(member):
            return find(value)
        if inspect.isclass(member) and issubclass(member, PurePath):
            return member(value)
        if member is os.PathLike:
            return Path(value)
    return value
