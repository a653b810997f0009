"""``class_path`` + ``init_args`` sections: importing the class and checking its arguments.

A section is *resolved* to plain data (the class's import path, every argument the class takes with
its default filled in, each value checked against its annotation); :mod:`framework.cli.build` then
makes the objects from exactly that, so what ``--print_config`` shows is what gets built.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import importlib
import inspect
from pathlib import PurePath
from typing import Any

import yaml

from framework.cli.class_names import class_path_of, import_path_of, short_names
from framework.cli.coerce import Mismatch, check, mismatch_error
from framework.cli.config import CLASS_KEYS, Config, FlagText
from framework.cli.errors import ConfigError, Key, dotted, placed
from framework.cli.signatures import parameters
from framework.cli.yaml_files import parse_text

_LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning")


def import_class(path: Any, key: Key, origin: str | None) -> type:
    """The class ``path`` names (``package.module.Class``, or a built-in callback's or logger's bare name)."""
    where = placed(key, origin)
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{where}: class_path must be a class's import path such as mypackage.models.Net, "
                          f"got {path!r}.")
    if "." not in path:
        if path not in short_names():
            near = difflib.get_close_matches(path, list(short_names()), n=2)
            hint = f" Did you mean {' or '.join(near)}?" if near else ""
            raise ConfigError(f"{where}: class_path {path!r} is not a full import path (package.module.{path}) "
                              f"and no built-in callback, logger or strategy has that name.{hint}")
        path = short_names()[path]
    module_name, _, name = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is None or not (module_name == error.name or module_name.startswith(error.name + ".")):
            raise  # the module is there but something it imports is not: its traceback says what
        ours = short_names().get(name) if path.split(".")[0] in _LIGHTNING_PACKAGES else None
        if ours:
            raise ConfigError(f"{where}: class_path {path!r} is Lightning's; framework's is {ours}.") from None
        raise ConfigError(f"{where}: cannot import {module_name!r} for class_path {path!r}: {error}. Run from the "
                          f"folder that holds it or add that folder to PYTHONPATH.") from None
    found = getattr(module, name, None)
    if not inspect.isclass(found):
        classes = [attr for attr, value in vars(module).items() if inspect.isclass(value)]
        near = difflib.get_close_matches(name, classes, n=3)
        hint = f" Did you mean {', '.join(f'{module_name}.{n}' for n in near)}?" if near else ""
        what = "has no" if found is None else "has something that is not a class named"
        raise ConfigError(f"{where}: module {module_name!r} {what} {name!r}.{hint}")
    return found


def public_path(cls: type) -> str:
    """``framework.Module`` rather than ``framework.module.Module`` where the package exports the class."""
    package = cls.__module__.split(".")[0]
    exported = getattr(importlib.import_module(package), cls.__name__, None)
    return f"{package}.{cls.__name__}" if exported is cls else class_path_of(cls)


def nearest_keys(name: str, valid: list[str]) -> str:
    """``did you mean max_epochs?`` for an unknown key, or the valid keys when few enough to list."""
    near = difflib.get_close_matches(name, valid, n=3, cutoff=0.6)
    if near:
        return f"Did you mean {' or '.join(near)}?"
    if len(valid) <= 12:
        return f"It takes: {', '.join(valid) if valid else 'no arguments'}."
    return "--print_config shows every key it takes."


def resolve_arguments(given: dict, named: dict[str, inspect.Parameter], annotations: dict[str, Any], key: Key,
                      config: Config, owner: str, *, takes_more: bool = False,
                      carried: dict[str, tuple[Any, str | None]] | None = None) -> dict:
    """``given`` checked against a signature: every argument, defaults filled in, values typed, in order.

    ``carried`` arguments (given for a class named earlier, with their sources) apply where not given anew
    and the signature takes them; ``takes_more`` (``**kwargs``) lets other names through unchecked.
    """
    sources = {name: config.origin(key + (name,)) for name in given}
    for name, (value, origin) in (carried or {}).items():
        if name in named and name not in given:
            given, sources[name] = {**given, name: value}, origin
    unknown = [name for name in given if name not in named]
    if unknown and not takes_more:
        name = unknown[0]
        raise ConfigError(f"{placed(key + (name,), sources[name])}: {owner} takes no argument "
                          f"{name!r}. {nearest_keys(name, list(named))}")
    resolved = {}
    for name, parameter in named.items():
        if name not in given:
            if parameter.default is inspect.Parameter.empty:
                flag = "" if any(isinstance(part, int) for part in key) else f" or as --{dotted(key + (name,))}=..."
                raise ConfigError(f"{dotted(key + (name,))} is required: {owner} has no default for {name!r}. Give "
                                  f"it in a config file{flag}.")
            if _prints_as_yaml(parameter.default):
                resolved[name] = _plain(parameter.default)
            continue
        annotation = annotations[name]
        if parameter.default is None:  # ``tag: str = None`` takes None, whatever its annotation says
            annotation = annotation | None if annotation not in (inspect.Parameter.empty, Any) else annotation
        resolved[name] = check_value(given[name], annotation, key + (name,), config, sources[name])
    for name in unknown:
        resolved[name] = check_value(given[name], Any, key + (name,), config, sources[name])
    return resolved


def check_value(value: Any, annotation: Any, key: Key, config: Config, origin: str | None = None) -> Any:
    """``value`` checked against ``annotation``; an error names the key, the expected type and the source
    (``origin``, else where ``config`` says ``key`` came from)."""
    try:
        return check(value, annotation, key, lambda node, base, at: resolve_class_node(node, base, at, config))
    except Mismatch:
        raise mismatch_error(key, value, annotation, origin or config.origin(key)) from None


def resolve_class_node(node: dict, base: type, key: Key, config: Config) -> dict:
    """A ``class_path`` section as plain data: the class's import path and all its arguments, checked.

    Arguments given for a class the section named earlier apply where this class takes them.
    """
    cls = import_class(node["class_path"], key + ("class_path",), config.origin(key + ("class_path",)))
    require_subclass(cls, base, key, config.origin(key + ("class_path",)))
    init_args = node.get("init_args") or {}
    if isinstance(init_args, FlagText):
        init_args = parse_text(init_args) or {}
    if not isinstance(init_args, dict):
        raise mismatch_error(key + ("init_args",), init_args, dict, config.origin(key + ("init_args",)))
    # keys beside class_path are its init_args, as ``--model.lr`` is ``--model.init_args.lr``
    init_args = {**init_args, **{name: value for name, value in node.items() if name not in CLASS_KEYS}}
    named, annotations, takes_more = parameters(cls)
    arguments = resolve_arguments(init_args, named, annotations, key + ("init_args",), config, cls.__name__,
                                  takes_more=takes_more, carried=config.carried.get(key))
    given = str(node["class_path"])
    return {"class_path": given if "." in given else short_names()[given], "init_args": arguments}


def require_subclass(cls: type, base: type, key: Key, origin: str | None) -> None:
    """Refuse a class that is not a ``base``, saying what it is and what was expected."""
    if base is object or issubclass(cls, base):
        return
    hint = ""
    if cls.__module__.split(".")[0] in _LIGHTNING_PACKAGES:
        ours = short_names().get(cls.__name__)
        hint = (f" It is Lightning's; framework's is {ours}." if ours else
                f" It is a Lightning class: make it subclass {public_path(base)} instead.")
    elif any(klass.__module__.split(".")[0] in _LIGHTNING_PACKAGES for klass in cls.__mro__):
        hint = f" It subclasses a Lightning class: make it subclass {public_path(base)} instead."
    bases = ", ".join(class_path_of(klass) for klass in cls.__bases__)
    raise ConfigError(f"{placed(key, origin)}: {class_path_of(cls)} is not a {public_path(base)} (its base class: "
                      f"{bases}); {dotted(key)} must name a subclass of {public_path(base)}.{hint}")


def _prints_as_yaml(value: Any) -> bool:
    try:
        yaml.safe_dump(_plain(value))
    except yaml.YAMLError:
        return False
    return True


def _plain(value: Any) -> Any:
    if isinstance(value, (tuple, set, frozenset)):
        return [_plain(item) for item in value]
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.name
    if dataclasses.is_dataclass(value) and not inspect.isclass(value):
        return {field.name: _plain(getattr(value, field.name)) for field in dataclasses.fields(value) if field.init}
    if callable(value) and not inspect.isclass(value):
        return import_path_of(value) or value
    return value
