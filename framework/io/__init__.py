"""Files: fsspec paths, atomic writes, the checkpoint format, and sharded (DCP) checkpoints."""

from framework.io.checkpoint import load_checkpoint, save_checkpoint
from framework.io.sharded import consolidate

__all__ = ["consolidate", "load_checkpoint", "save_checkpoint"]
