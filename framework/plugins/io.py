"""Lightning's checkpoint IO plugins (``lightning.pytorch.plugins.io``): how checkpoints are saved, loaded and
removed. See :mod:`framework.io.checkpoint_io`.

Example::

    Trainer(plugins=[AsyncCheckpointIO()])           # ModelCheckpoint writes in the background
"""

from framework.io.async_writer import AsyncCheckpointIO
from framework.io.checkpoint_io import CheckpointIO, TorchCheckpointIO

__all__ = ["AsyncCheckpointIO", "CheckpointIO", "TorchCheckpointIO"]
