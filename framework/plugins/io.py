"""``lightning.pytorch.plugins.io``'s name for the background checkpoint writer."""

from framework.io.async_writer import AsyncCheckpointIO

__all__ = ["AsyncCheckpointIO"]
