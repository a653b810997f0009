"""Hyperparameter searches before training: the learning-rate range test and the largest batch size that fits,
through ``Tuner``; the searches themselves live with the callbacks that run them when fit starts
(``framework.callbacks.lr_finder``, ``framework.callbacks.batch_size_finder``)."""

from framework.callbacks.batch_size_finder import BatchSizeFinder
from framework.callbacks.lr_finder import LearningRateFinder, LRFinder
from framework.tuner.tuning import Tuner

__all__ = ["BatchSizeFinder", "LRFinder", "LearningRateFinder", "Tuner"]
