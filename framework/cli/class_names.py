"""How a config names classes and functions: import paths (``mypackage.models.Net``) and, for the
built-in callbacks, loggers and strategies, bare names (``ModelCheckpoint``) as LightningCLI users
write them."""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from typing import Any

from framework.cli.yaml_files import parse_text

_IMPORT_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
# Packages whose exported classes are known by name alone, each with the base its classes must extend.
_PACKAGES = {"framework.callbacks": "Callback", "framework.loggers": "Logger", "framework.strategies": "Strategy"}


@functools.cache
def short_names() -> dict[str, str]:
    """Each bare name and the import path it stands for (``framework.callbacks.ModelCheckpoint``)."""
    names: dict[str, str] = {}
    for package, base_name in _PACKAGES.items():
        module = importlib.import_module(package)
        base = getattr(module, base_name)
        for name in module.__all__:
            found = getattr(module, name)
            if inspect.isclass(found) and issubclass(found, base) and found is not base:
                names.setdefault(name, f"{package}.{name}")
    return names


def names_a_class(text: Any) -> bool:
    """``mypackage.models.Net`` or a built-in's bare name (``ModelCheckpoint``), not ``true``, ``ddp`` or ``3``."""
    return (isinstance(text, str) and _IMPORT_PATH.fullmatch(text) is not None
            and isinstance(parse_text(text), str) and ("." in text or text in short_names()))


def class_path_of(cls: type) -> str:
    """The import path a config names ``cls`` by."""
    return f"{cls.__module__}.{cls.__qualname__}"


def find(path: str) -> Any:
    """The object an import path (``torch.nn.functional.relu``) names, or None where it names nothing."""
    module_name, _, name = path.rpartition(".")
    if not module_name or _IMPORT_PATH.fullmatch(path) is None:
        return None
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    return getattr(module, name, None)


def import_path_of(function: Any) -> str | None:
    """``torch.nn.functional.relu`` for that function, when importing the path gives it back."""
    module_name, name = getattr(function, "__module__", None), getattr(function, "__qualname__", "")
    if not module_name or not name or "<" in name or "." in name:
        return None
    path = f"{module_name}.{name}"
    return path if find(path) is function else None
