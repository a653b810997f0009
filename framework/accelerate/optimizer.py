"""``accelerate.optimizer``'s name: the optimizer ``prepare`` returns."""

from framework.accelerate.prepared import AcceleratedOptimizer

__all__ = ["AcceleratedOptimizer"]
