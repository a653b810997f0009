"""Loggers: where logged metrics and hyperparameters are written."""

from framework.loggers.base import DummyLogger, Logger
from framework.loggers.csv import CSVLogger
from framework.loggers.tensorboard import TensorBoardLogger

__all__ = ["CSVLogger", "DummyLogger", "Logger", "TensorBoardLogger"]
