"""framework: a PyTorch training framework in the Lightning style.

``import framework as L`` gives ``L.Trainer``, ``L.Module``, ``L.DataModule``,
``L.Runtime`` and ``L.seed_everything``.
"""

from framework.callbacks.base import Callback
from framework.datamodule import DataModule
from framework.errors import CheckpointError, MisconfigurationError
from framework.module import Module
from framework.runtime import Runtime
from framework.seed import seed_everything
from framework.trainer import Trainer
from framework.version import __version__ as __version__

__all__ = [
    "Callback",
    "CheckpointError",
    "DataModule",
    "MisconfigurationError",
    "Module",
    "Runtime",
    "Trainer",
    "seed_everything",
]

# Lightning's names for what is here under another: a script that kept one gets told which.
_LIGHTNING_NAMES = {
    "Fabric": "Runtime",
    "LightningModule": "Module",
    "LightningDataModule": "DataModule",
}


def __getattr__(name: str) -> object:
    if name in _LIGHTNING_NAMES:
        ours = _LIGHTNING_NAMES[name]
        raise AttributeError(
            f"framework has no {name}: Lightning's {name} is framework.{ours} here. Use L.{ours}, or import it "
            f"under the old name: `from framework import {ours} as {name}`."
        )
    raise AttributeError(f"module 'framework' has no attribute {name!r}")
