"""framework: a PyTorch training framework in the Lightning style.

``import framework as L`` gives ``L.Trainer``, ``L.Module``, ``L.DataModule``,
``L.Runtime`` and ``L.seed_everything``.

Each name (and each subpackage, ``L.callbacks``, ``L.loggers`` ...) is imported when first used, so that
importing the package alone, as the ``framework`` command does, loads neither torch nor the Trainer.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

from framework.version import __version__ as __version__

if TYPE_CHECKING:
    from framework.callbacks.base import Callback
    from framework.datamodule import DataModule
    from framework.errors import CheckpointError, MisconfigurationError, UnsafeCheckpointError
    from framework.module import Module
    from framework.runtime import Runtime
    from framework.seed import seed_everything
    from framework.trainer import Trainer

__all__ = [
    "Callback",
    "CheckpointError",
    "DataModule",
    "MisconfigurationError",
    "Module",
    "Runtime",
    "Trainer",
    "UnsafeCheckpointError",
    "seed_everything",
]

# Where each public name is defined.
_HOMES = {
    "Callback": "framework.callbacks.base",
    "CheckpointError": "framework.errors",
    "DataModule": "framework.datamodule",
    "MisconfigurationError": "framework.errors",
    "Module": "framework.module",
    "Runtime": "framework.runtime",
    "Trainer": "framework.trainer",
    "UnsafeCheckpointError": "framework.errors",
    "seed_everything": "framework.seed",
}

# Lightning's names for what is here under another: a script that kept one gets told which.
_LIGHTNING_NAMES = {
    "Fabric": "Runtime",
    "LightningModule": "Module",
    "LightningDataModule": "DataModule",
}


def __getattr__(name: str) -> object:
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    elif name in _LIGHTNING_NAMES:
        ours = _LIGHTNING_NAMES[name]
        raise AttributeError(
            f"framework has no {name}: Lightning's {name} is framework.{ours} here. Use L.{ours}, or import it "
            f"under the old name: `from framework import {ours} as {name}`."
        )
    elif not name.startswith("_") and importlib.util.find_spec(f"framework.{name}") is not None:
        value = importlib.import_module(f"framework.{name}")  # L.callbacks, L.loggers ... as after `import framework.X`
    else:
        raise AttributeError(f"module 'framework' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
