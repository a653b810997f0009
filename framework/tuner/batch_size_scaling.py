"""The batch-size search under Lightning's module path (``lightning.pytorch.tuner.batch_size_scaling``); it lives
with its callback, ``framework.callbacks.batch_size_finder``."""

from framework.callbacks.batch_size_finder import scale_batch_size

__all__ = ["scale_batch_size"]
