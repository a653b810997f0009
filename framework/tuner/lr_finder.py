"""The learning-rate range test under Lightning's module path (``lightning.pytorch.tuner.lr_finder``); it lives
with its callback, ``framework.callbacks.lr_finder``."""

from framework.callbacks.lr_finder import LRFinder, lr_find

__all__ = ["LRFinder", "lr_find"]
