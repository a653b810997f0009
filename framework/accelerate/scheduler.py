"""``accelerate.scheduler``'s name: the learning-rate scheduler ``prepare`` returns."""

from framework.accelerate.prepared import AcceleratedScheduler

__all__ = ["AcceleratedScheduler"]
