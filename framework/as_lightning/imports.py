"""Lightning's ``utilities.imports`` flags that libraries read: whether an optional package is installed."""

from __future__ import annotations

import importlib.util

__all__ = ["_MATPLOTLIB_AVAILABLE", "_OMEGACONF_AVAILABLE", "_RICH_AVAILABLE", "_TORCHVISION_AVAILABLE"]


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


_OMEGACONF_AVAILABLE = _installed("omegaconf")
_TORCHVISION_AVAILABLE = _installed("torchvision")
_MATPLOTLIB_AVAILABLE = _installed("matplotlib")
_RICH_AVAILABLE = _installed("rich")
