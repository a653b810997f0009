"""Loggers: where logged metrics and hyperparameters are written."""

from framework.loggers.base import DummyLogger, Logger
from framework.loggers.csv import CSVLogger
from framework.loggers.mlflow import MLFlowLogger
from framework.loggers.tensorboard import TensorBoardLogger
from framework.loggers.wandb import WandbLogger

__all__ = ["CSVLogger", "DummyLogger", "Logger", "MLFlowLogger", "TensorBoardLogger", "WandbLogger"]
