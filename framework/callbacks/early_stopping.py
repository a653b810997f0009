"""``EarlyStopping``: stop training when a monitored metric stops improving (or crosses a threshold)."""

import logging
import math
import warnings
from enum import Enum
from typing import Any

import torch

from framework.callbacks.base import Callback
from framework.callbacks.monitor_mode import IMPROVES, check_mode
from framework.checks import check_int, is_number
from framework.errors import MisconfigurationError, describe
from framework.protocols import TrainerLike

# A child of the "framework" logger: its messages reach the console as the others do.
log = logging.getLogger(__name__)

_SIGN = {"min": "<", "max": ">"}


class EarlyStoppingReason(Enum):
    """Why an ``EarlyStopping`` stopped training (``early_stopping.stopping_reason``)."""

    #: Training was not stopped by this callback.
    NOT_STOPPED = 0
    #: The monitored value reached ``stopping_threshold``.
    STOPPING_THRESHOLD = 1
    #: The monitored value went past ``divergence_threshold``.
    DIVERGENCE_THRESHOLD = 2
    #: ``patience`` checks in a row without improvement.
    PATIENCE_EXHAUSTED = 3
    #: The monitored value was NaN or infinite (with ``check_finite=True``).
    NON_FINITE_METRIC = 4


class EarlyStopping(Callback):
    """Set ``trainer.should_stop`` when ``monitor`` has not improved for ``patience`` checks.

    A check runs after each validation (or at each training epoch's end when validation runs
    once an epoch). It improves when it beats the best value by more than ``min_delta``.
    Training also stops at once when the value is not finite (``check_finite``), reaches
    ``stopping_threshold``, or passes ``divergence_threshold`` the wrong way. The Trainer
    still runs ``min_epochs`` / ``min_steps`` first. The reason is logged when it stops, and
    kept as ``stopping_reason`` (an ``EarlyStoppingReason``) and ``stopping_reason_message``.
    A negative ``min_delta`` lets a slightly worse value count as an improvement (as in Lightning).

    :param monitor: the logged metric to watch, e.g. ``"val_loss"``.
    :param min_delta: how much better than the best a value must be to count as an improvement (default 0.0).
    :param patience: how many checks in a row without improvement stop training (default 3).
    :param verbose: also log each improvement, and warn when ``monitor`` is missing with ``strict=False``.
    :param mode: ``"min"`` (default): lower is better; ``"max"``: higher is better.
    :param strict: True (default) raises when ``monitor`` was not logged; False skips that check.
    :param check_finite: True (default) stops when the value is nan or infinite.
    :param stopping_threshold: stop as soon as the value is better than this; ``None`` (default): no threshold.
    :param divergence_threshold: stop as soon as the value is worse than this; ``None`` (default): no threshold.
    :param check_on_train_epoch_end: True checks at each training epoch's end, False after each validation;
        ``None`` (default): at the epoch's end when validation runs exactly once an epoch.
    :param log_rank_zero_only: with several ranks, only rank 0 logs these messages (default False: every rank).
    :raises MisconfigurationError: where ``monitor`` is not a non-empty string, ``mode`` is neither "min" nor "max",
        ``patience`` is not an int >= 0, or ``min_delta`` is not a number.

    Example::

        Trainer(callbacks=[EarlyStopping(monitor="val_loss", patience=3, min_delta=1e-3)])
    """

    reads_epoch_metrics = True

    def __init__(
        self,
        monitor: str,
        min_delta: float = 0.0,
        patience: int = 3,
        verbose: bool = False,
        mode: str = "min",
        strict: bool = True,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        log_rank_zero_only: bool = False,
    ) -> None:
        if not isinstance(monitor, str) or not monitor:
            raise MisconfigurationError(f"EarlyStopping(monitor={describe(monitor)}): accepted is a logged name.")
        check_mode("EarlyStopping", mode)
        check_int("EarlyStopping", "patience", patience, 0)
        if not is_number(min_delta) or math.isnan(min_delta):
            raise MisconfigurationError(f"EarlyStopping(min_delta={describe(min_delta)}): accepted is a number.")
        self.monitor = monitor
        self.mode = mode
        self.patience = patience
        self.verbose = verbose
        self.strict = strict
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.log_rank_zero_only = log_rank_zero_only
        # an improvement must beat the best by min_delta in the right direction
        self.min_delta = min_delta if mode == "max" else -min_delta
        self._check_on_train_epoch_end = check_on_train_epoch_end
        self.wait_count = 0
        self.stopped_epoch = 0
        self.best_score = torch.tensor(math.inf if mode == "min" else -math.inf)
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None

    @property
    def state_key(self) -> str:
        """EarlyStoppings on different metrics or modes keep separate states."""
        return self._generate_state_key(monitor=self.monitor, mode=self.mode)

    @property
    def monitor_op(self) -> Any:
        """``torch.lt`` for mode "min", ``torch.gt`` for "max"."""
        return IMPROVES[self.mode]

    def setup(self, trainer: TrainerLike, pl_module: Any, stage: str) -> None:
        """Check at the training epoch's end when validation runs exactly once per epoch, else after validation."""
        if self._check_on_train_epoch_end is None:
            self._check_on_train_epoch_end = trainer.val_check_interval == 1.0 and trainer.check_val_every_n_epoch == 1

    def on_train_epoch_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """The check, when it runs at the training epoch's end."""
        if self._check_on_train_epoch_end and not self._skips(trainer):
            self._run_early_stopping_check(trainer)

    def on_validation_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """The check, when it runs after each validation."""
        if not self._check_on_train_epoch_end and not self._skips(trainer):
            self._run_early_stopping_check(trainer)

    def _skips(self, trainer: TrainerLike) -> bool:
        return trainer.state.fn != "fit" or trainer.sanity_checking or bool(trainer.fast_dev_run)

    def _run_early_stopping_check(self, trainer: TrainerLike) -> None:
        """Evaluate the monitored value and, when any rank's says so, set ``trainer.should_stop`` (Lightning's name
        for this step, which subclasses override)."""
        metrics = trainer.callback_metrics
        current = metrics.get(self.monitor)
        wants_stop, reason = False, None
        if current is not None:
            wants_stop, reason = self._evaluate_stopping_criteria(torch.as_tensor(current).detach().squeeze().cpu())
        # One vote of every rank: has the value, wants to stop. A rank without validation batches may lack a value
        # logged without sync_dist that the others have: it follows them; missing everywhere is the error.
        has_value, should_stop = (bool(vote) for vote in trainer.runtime.all_reduce(
            torch.tensor([current is not None, wants_stop], dtype=torch.float32), reduce_op="max"))
        if not has_value:
            message = (f"EarlyStopping(monitor={self.monitor!r}) found no {self.monitor!r} in the logged metrics: "
                       f"{sorted(metrics)}. Log it with self.log({self.monitor!r}, value), or change monitor=")
            if self.strict:
                raise MisconfigurationError(message + " (or pass strict=False to skip the check instead).")
            if self.verbose:
                warnings.warn(message + ".", RuntimeWarning, stacklevel=2)
            return
        trainer.should_stop = trainer.should_stop or should_stop
        if should_stop:
            self.stopped_epoch = trainer.current_epoch
            if wants_stop:
                self.stopping_reason_message = reason
        if reason and (should_stop or self.verbose):
            self._log_info(trainer, reason, self.log_rank_zero_only)

    @staticmethod
    def _log_info(trainer: TrainerLike, message: str, log_rank_zero_only: bool) -> None:
        rank = trainer.global_rank if trainer.world_size > 1 else None
        if rank is None or rank == 0 or not log_rank_zero_only:
            log.info(message if rank is None else f"[rank: {rank}] {message}")

    def _evaluate_stopping_criteria(self, current: torch.Tensor) -> tuple[bool, str | None]:
        """Whether ``current`` ends training, and a sentence saying why (or how it improved); the reason for a
        stop goes to ``stopping_reason``. Lightning's name and contract, for subclasses that override it."""
        kind, reason = self._judge(current)
        if kind is not None:
            self.stopping_reason = kind
        return kind is not None, reason

    def _judge(self, current: torch.Tensor) -> tuple[EarlyStoppingReason | None, str | None]:
        better, value, stop = self.monitor_op, current.item(), " Signaling Trainer to stop."
        if self.check_finite and not torch.isfinite(current):
            return EarlyStoppingReason.NON_FINITE_METRIC, (
                f"Monitored metric {self.monitor} = {value} is not finite. Previous best value was "
                f"{self.best_score.item():.3f}." + stop)
        if self.stopping_threshold is not None and better(current, self.stopping_threshold):
            return EarlyStoppingReason.STOPPING_THRESHOLD, (
                f"Stopping threshold reached: {self.monitor} = {value} {_SIGN[self.mode]} {self.stopping_threshold}."
                + stop)
        if self.divergence_threshold is not None and better(-current, -self.divergence_threshold):
            return EarlyStoppingReason.DIVERGENCE_THRESHOLD, (
                f"Divergence threshold reached: {self.monitor} = {value} {_SIGN[self.mode]} "
                f"{self.divergence_threshold}." + stop)
        if better(current - self.min_delta, self.best_score):
            reason = self._improvement_message(current)
            self.best_score = current
            self.wait_count = 0
            return None, reason
        self.wait_count += 1
        if self.wait_count >= self.patience:
            return EarlyStoppingReason.PATIENCE_EXHAUSTED, (
                f"Monitored metric {self.monitor} did not improve in the last {self.wait_count} records. "
                f"Best score: {self.best_score.item():.3f}." + stop)
        return None, None

    def _improvement_message(self, current: torch.Tensor) -> str:
        if torch.isfinite(self.best_score):
            return (f"Metric {self.monitor} improved by {abs(self.best_score - current).item():.3f} >= "
                    f"min_delta = {abs(self.min_delta)}. New best score: {current.item():.3f}")
        return f"Metric {self.monitor} improved. New best score: {current.item():.3f}"

    def state_dict(self) -> dict[str, Any]:
        """How long it has waited and the best value so far, to go on counting after a resume."""
        return {"wait_count": self.wait_count, "stopped_epoch": self.stopped_epoch, "best_score": self.best_score,
                "patience": self.patience, "stopping_reason": self.stopping_reason.value,
                "stopping_reason_message": self.stopping_reason_message}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        self.wait_count = state_dict["wait_count"]
        self.stopped_epoch = state_dict["stopped_epoch"]
        self.best_score = state_dict["best_score"]
        self.patience = state_dict["patience"]
        self.stopping_reason = EarlyStoppingReason(state_dict.get("stopping_reason", 0))
        self.stopping_reason_message = state_dict.get("stopping_reason_message")
