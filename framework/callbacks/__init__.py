"""Callbacks: the base class and the built-in ones (checkpointing, early stopping, progress, monitors).

The modules defining these classes do not postpone annotations (no ``from __future__ import
annotations``): tools that build a command line or a config from a constructor (jsonargparse,
LightningCLI-style scripts, ``framework fit --config``) read ``inspect.signature(cls)`` and need each
annotation as a type, not as its source text.

``BatchSizeFinder`` and ``LearningRateFinder`` run the tuner's searches when fit starts: the searches live with
them (``lr_finder``, ``batch_size_finder``) and start trial runs of the Trainer they are handed, of its own class,
so nothing here imports the Trainer.
"""

from framework.callbacks.base import Callback
from framework.callbacks.batch_size_finder import BatchSizeFinder
from framework.callbacks.checkpoint import Checkpoint, OnExceptionCheckpoint
from framework.callbacks.device_stats import DeviceStatsMonitor
from framework.callbacks.early_stopping import EarlyStopping, EarlyStoppingReason
from framework.callbacks.finetuning import BackboneFinetuning, BaseFinetuning
from framework.callbacks.gradient_accumulation import GradientAccumulationScheduler
from framework.callbacks.lambda_callback import LambdaCallback
from framework.callbacks.lr_finder import LearningRateFinder
from framework.callbacks.lr_monitor import LearningRateMonitor
from framework.callbacks.model_checkpoint import ModelCheckpoint
from framework.callbacks.model_summary import ModelSummary
from framework.callbacks.prediction_writer import BasePredictionWriter
from framework.callbacks.progress import ProgressBar, TQDMProgressBar
from framework.callbacks.pruning import ModelPruning
from framework.callbacks.rich_model_summary import RichModelSummary
from framework.callbacks.rich_progress import RichProgressBar, RichProgressBarTheme
from framework.callbacks.spike import SpikeDetection, TrainingSpikeException
from framework.callbacks.stochastic_weight_avg import StochasticWeightAveraging
from framework.callbacks.throughput import ThroughputMonitor
from framework.callbacks.timer import Timer
from framework.callbacks.weight_averaging import EMAWeightAveraging, WeightAveraging

__all__ = [
    "BackboneFinetuning",
    "BaseFinetuning",
    "BasePredictionWriter",
    "BatchSizeFinder",
    "Callback",
    "Checkpoint",
    "DeviceStatsMonitor",
    "EMAWeightAveraging",
    "EarlyStopping",
    "EarlyStoppingReason",
    "GradientAccumulationScheduler",
    "LambdaCallback",
    "LearningRateFinder",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ModelPruning",
    "ModelSummary",
    "OnExceptionCheckpoint",
    "ProgressBar",
    "RichModelSummary",
    "RichProgressBar",
    "RichProgressBarTheme",
    "SpikeDetection",
    "StochasticWeightAveraging",
    "TQDMProgressBar",
    "ThroughputMonitor",
    "Timer",
    "TrainingSpikeException",
    "WeightAveraging",
]
