"""All loop counters and the run's status, in one object with ``state_dict()``."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class TrainerFn(str, Enum):
    """The entry point the user called."""

    #: ``trainer.fit``.
    FITTING = "fit"
    #: ``trainer.validate``.
    VALIDATING = "validate"
    #: ``trainer.test``.
    TESTING = "test"
    #: ``trainer.predict``.
    PREDICTING = "predict"


class RunningStage(str, Enum):
    """The loop that is running now (fit runs sanity checking, training and validation)."""

    #: The training loop of ``fit``.
    TRAINING = "train"
    #: The few validation batches ``fit`` runs before training (``num_sanity_val_steps``).
    SANITY_CHECKING = "sanity_check"
    #: A validation: in ``validate``, or inside ``fit``.
    VALIDATING = "validate"
    #: The loop of ``test``.
    TESTING = "test"
    #: The loop of ``predict``.
    PREDICTING = "predict"


class TrainerStatus(str, Enum):
    """The run's status; a run that failed ends ``INTERRUPTED`` too, as in Lightning."""

    #: No run has started yet.
    INITIALIZING = "initializing"
    #: A run is going on.
    RUNNING = "running"
    #: The last run ended normally.
    FINISHED = "finished"
    #: The last run raised, was interrupted (Ctrl-C) or was preempted.
    INTERRUPTED = "interrupted"


@dataclass
class TrainerState:
    """What the trainer is doing and how far it has come (``trainer.state``). The counters are saved in
    checkpoints (``state_dict``), so a resumed fit goes on from where the saved one was.

    :param fn: the entry point running (or run last); None before the first.
    :param stage: the loop running now; None between runs.
    :param status: the status of the current or last run.
    :param current_epoch: finished training epochs.
    :param global_step: optimizer steps taken (every ``optimizer.step()`` in manual optimization).
    :param batch_idx: the index of the next training batch inside the current epoch.
    :param total_batch_idx: training batches run in this fit, over every epoch.
    :param batches_stepped: training batches that ended with an optimizer step (in manual optimization, every
        batch); step-level logs are numbered with it, as in Lightning.
    :param epoch_finished: every batch of ``current_epoch`` has run (its epoch-end hooks are running); not for an
        epoch cut short, which a checkpoint saved then resumes inside.
    :param should_stop: a stop was asked for (``EarlyStopping``, a callback setting it); the fit ends at the next
        point where it may.
    :param is_last_batch: the running training batch is its epoch's last.
    :param validated: a validation (not the sanity check) has run in this fit.
    :param shuffle_seed: what decides the training data's order in every epoch; -1 until the first shuffled loader
        needs one.
    :param order_epoch: -1, or the epoch whose data order a resumed fit finishes from ``batch_idx`` before a new
        epoch: set when an epoch ended before its last batch (``max_steps``, ``max_time``, a stop), so that a run
        extended from a checkpoint saved then trains the rest of it.
    """

    fn: TrainerFn | None = None
    stage: RunningStage | None = None
    status: TrainerStatus = TrainerStatus.INITIALIZING
    current_epoch: int = 0
    global_step: int = 0
    batch_idx: int = 0
    total_batch_idx: int = 0
    batches_stepped: int = 0
    epoch_finished: bool = False
    should_stop: bool = False
    is_last_batch: bool = False
    validated: bool = False
    shuffle_seed: int = -1
    order_epoch: int = -1

    @property
    def finished(self) -> bool:
        """The run ended normally."""
        return self.status == TrainerStatus.FINISHED

    @property
    def stopped(self) -> bool:
        """The run was interrupted or failed."""
        return self.status == TrainerStatus.INTERRUPTED

    @property
    def epoch_row_step(self) -> int:
        """Inside fit, the step an epoch-level row written now is numbered with (a training epoch's, a
        validation's): the last step-level row's, as in Lightning."""
        return max(self.batches_stepped - 1, 0)

    @property
    def sanity_checking(self) -> bool:
        """The sanity-check validation at the start of ``fit`` is running."""
        return self.stage == RunningStage.SANITY_CHECKING

    #: The names of the fields ``state_dict`` saves.
    counters: tuple[str, ...] = field(
        default=("current_epoch", "global_step", "batch_idx", "total_batch_idx", "batches_stepped", "epoch_finished",
                 "shuffle_seed", "order_epoch"),
        init=False,
        repr=False,
    )

    def state_dict(self) -> dict[str, Any]:
        """The counters as plain integers (the checkpoint's ``loops`` entry holds them)."""
        return {name: getattr(self, name) for name in self.counters}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the counters from ``state_dict()``'s output; counters it lacks keep their value."""
        for name in self.counters:
            if name in state:
                setattr(self, name, type(getattr(self, name))(state[name]))
