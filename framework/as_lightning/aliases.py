"""Lightning's modules as stand-ins whose names are framework's objects, and the import hook that makes them.

``pytorch_lightning.callbacks`` imported under the switch is an ``AliasModule``: reading ``ModelCheckpoint`` from
it gives ``framework.callbacks.ModelCheckpoint`` itself, so classes are one object under every spelling and
``isinstance`` holds across a library and its user. Every Lightning module imports (a library imports more than
it uses); a name framework lacks is a ``NotProvided`` that fails when used.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

from framework.as_lightning.names import (
    LIGHTNING_VERSION,
    MODULES,
    RENAMED,
    VERSIONED,
    canonical,
    is_lightning_name,
    sources_of,
)
from framework.as_lightning.not_provided import NotProvided


class AliasModule(types.ModuleType):
    """The Lightning module ``name``, answering each attribute from the framework modules listed for it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []  # a package: its submodules are imported through the finder
        self._framework_sources = sources_of(name)[1]
        if canonical(name) in VERSIONED or name in VERSIONED:
            self.__version__ = LIGHTNING_VERSION

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            if name == "__all__":
                return self._public_names()
            raise AttributeError(name)
        value = self._look_up(name)
        setattr(self, name, value)
        return value

    def _look_up(self, name: str) -> Any:
        submodule = f"{self.__name__}.{name}"
        if canonical(submodule) in MODULES:
            return importlib.import_module(submodule)
        for ours in (name, RENAMED.get(name)):
            for source in self._framework_sources:
                if ours is not None and hasattr(module := importlib.import_module(source), ours):
                    value = getattr(module, ours)
                    if not isinstance(value, types.ModuleType):  # a framework submodule is not Lightning's
                        return value
        return NotProvided(submodule)

    def _public_names(self) -> list[str]:
        names: set[str] = set()
        for source in self._framework_sources:
            names.update(getattr(importlib.import_module(source), "__all__", ()))
        names.update(lightning for lightning, ours in RENAMED.items()
                     if ours in names and not lightning.startswith("_"))
        return sorted(names)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._public_names()})


class LightningFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports every ``lightning``, ``pytorch_lightning`` and ``lightning_fabric`` module as an ``AliasModule``."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not is_lightning_name(fullname):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return AliasModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing runs: every name is looked up when first read."""


def install_finder() -> None:
    """Put the finder first on ``sys.meta_path`` (once), so it answers before any installed Lightning."""
    if not any(isinstance(finder, LightningFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, LightningFinder())


def take_over(name: str) -> None:
    """Make ``sys.modules[name]`` the stand-in for the top-level Lightning package ``name``: the stub packages of
    the switch's folder call this as they are imported, and Python hands the importer what ``sys.modules`` holds."""
    install_finder()
    module = AliasModule(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, LightningFinder(), is_package=True)
    module.__loader__ = module.__spec__.loader
    sys.modules[name] = module
