"""Loggers: where logged metrics are written."""

from framework.loggers.base import DummyLogger, Logger

__all__ = ["DummyLogger", "Logger"]
