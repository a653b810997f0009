"""Files: fsspec paths, atomic writes, checkpoint files and sharded (DCP) checkpoint directories, background writes."""

from framework.io.async_writer import AsyncCheckpointIO
from framework.io.checkpoint_dir import consolidate
from framework.io.checkpoint_storage import (
           is_complete_checkpoint,
           load_checkpoint,
           newest_complete_checkpoint,
           save_checkpoint,
)

__all__ = ["AsyncCheckpointIO", "consolidate", "is_complete_checkpoint", "load_checkpoint",
           "newest_complete_checkpoint", "save_checkpoint"]
