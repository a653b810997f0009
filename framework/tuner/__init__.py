"""Hyperparameter searches before training: the learning-rate range test and the largest batch size that fits,
through ``Tuner`` or as callbacks run when fit starts."""

from framework.tuner.finder_callbacks import BatchSizeFinder, LearningRateFinder
from framework.tuner.lr_finder import LRFinder
from framework.tuner.tuning import Tuner

__all__ = ["BatchSizeFinder", "LRFinder", "LearningRateFinder", "Tuner"]
