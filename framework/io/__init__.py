"""Files: fsspec paths, atomic writes, the checkpoint format, sharded (DCP) checkpoint directories, writes in the background."""

from framework.io.async_writer import AsyncCheckpointIO
from framework.io.checkpoint import load_checkpoint, save_checkpoint
from framework.io.checkpoint_dir import consolidate

__all__ = ["AsyncCheckpointIO", "consolidate", "load_checkpoint", "save_checkpoint"]
