"""Files: fsspec paths, atomic writes, and the checkpoint format."""

from framework.io.checkpoint import load_checkpoint, save_checkpoint

__all__ = ["load_checkpoint", "save_checkpoint"]
