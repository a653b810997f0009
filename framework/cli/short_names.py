"""The bare class names a config may use (``class_path: ModelCheckpoint``), as LightningCLI users write them."""

from __future__ import annotations

import functools
import importlib
import inspect

# The packages whose exported classes are known by name alone, first match winning.
_PACKAGES = ("framework.callbacks", "framework.loggers", "framework.strategies")


@functools.cache
def short_names() -> dict[str, str]:
    """Each bare name and the import path it stands for (``framework.callbacks.ModelCheckpoint``)."""
    names: dict[str, str] = {}
    for package in _PACKAGES:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", dir(module)):
            if inspect.isclass(getattr(module, name, None)):
                names.setdefault(name, f"{package}.{name}")
    return names
