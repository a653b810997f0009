"""Hyperparameter searches before training: the learning-rate range test (and, later, the batch size)."""

from framework.tuner.lr_finder import LRFinder
from framework.tuner.tuning import Tuner

__all__ = ["LRFinder", "Tuner"]
