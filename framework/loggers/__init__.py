"""Loggers: where logged metrics are written."""

from framework.loggers.base import Logger

__all__ = ["Logger"]
