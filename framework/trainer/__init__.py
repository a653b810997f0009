"""The Trainer and its loops."""

from framework.trainer.state import RunningStage, TrainerFn, TrainerState, TrainerStatus
from framework.trainer.trainer import Trainer

__all__ = ["RunningStage", "Trainer", "TrainerFn", "TrainerState", "TrainerStatus"]
