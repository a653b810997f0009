"""framework: a PyTorch training framework in the Lightning style.

``import framework as L`` gives ``L.Trainer``, ``L.Module``, ``L.DataModule``,
``L.Runtime`` and ``L.seed_everything``.
"""

__version__ = "0.1.0"

from framework.callbacks.base import Callback
from framework.datamodule import DataModule
from framework.errors import CheckpointError, MisconfigurationError
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
    "seed_everything",
]
