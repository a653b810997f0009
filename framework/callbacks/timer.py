"""``Timer``: time each stage, and stop training once a duration has passed."""

import time
from datetime import timedelta
from typing import Any

from framework import console
from framework.callbacks.base import Callback
from framework.duration import parse_duration
from framework.errors import MisconfigurationError, describe
from framework.protocols import TrainerLike

STAGES = ("train", "sanity_check", "validate", "test", "predict")


class Timer(Callback):
    """Measures the time spent training, sanity checking, validating, testing and predicting; with ``duration``,
    stops training once that much training time has passed (checked every step, or every
    epoch with ``interval="epoch"``). The elapsed training time is saved in checkpoints, so a
    resumed run counts on from there.

    :param duration: the training time allowed: ``"DD:HH:MM:SS"``, a ``datetime.timedelta``, a dict of
        ``timedelta``'s arguments (``{"hours": 2}``) or a number of seconds; ``None`` (default): no limit.
    :param interval: check after every training batch (``"step"``, the default) or at each epoch's end
        (``"epoch"``).
    :param verbose: True (default) logs when the time is up, on global rank 0.
    :raises MisconfigurationError: where ``interval`` is neither "step" nor "epoch", or ``duration`` is not a
        duration of zero or more in one of the forms above.

    Example::

        timer = Timer(duration="00:02:00:00")          # DD:HH:MM:SS, a timedelta or {"hours": 2}
        trainer = Trainer(callbacks=[timer])
        trainer.fit(model)
        print(timer.time_elapsed("train"), timer.time_elapsed("validate"))
    """

    def __init__(self, duration: str | timedelta | dict[str, int] | None = None, interval: str = "step",
                 verbose: bool = True) -> None:
        if interval not in ("step", "epoch"):
            raise MisconfigurationError(f"Timer(interval={describe(interval)}): accepted 'step' or 'epoch'.")
        parsed = parse_duration("Timer", "duration", duration)
        self._duration = parsed.total_seconds() if parsed is not None else None
        self._interval = interval
        self._verbose = verbose
        self._start: dict[str, float | None] = dict.fromkeys(STAGES)
        self._end: dict[str, float | None] = dict.fromkeys(STAGES)
        self._offset = 0.0  # training time of the run this one resumed

    def start_time(self, stage: str = "train") -> float | None:
        """When ``stage`` last started (``time.monotonic()``), or None."""
        return self._start[_known(stage)]

    def end_time(self, stage: str = "train") -> float | None:
        """When ``stage`` last ended (``time.monotonic()``), or None while it runs or before it ran."""
        return self._end[_known(stage)]

    def time_elapsed(self, stage: str = "train") -> float:
        """Seconds spent in ``stage``'s last run (training: over resumed runs too).

        :param stage: ``"train"`` (default), ``"sanity_check"``, ``"validate"``, ``"test"`` or ``"predict"``; the
            same for ``start_time``, ``end_time`` and ``time_remaining``.
        """
        stage = _known(stage)
        start, end = self._start[stage], self._end[stage]
        offset = self._offset if stage == "train" else 0.0
        if start is None:
            return offset
        return (time.monotonic() if end is None else end) - start + offset

    def time_remaining(self, stage: str = "train") -> float | None:
        """Seconds left of ``duration`` (None without one)."""
        return None if self._duration is None else self._duration - self.time_elapsed(stage)

    def _begin(self, stage: str) -> None:
        self._start[stage], self._end[stage] = time.monotonic(), None

    def _stop(self, stage: str) -> None:
        self._end[stage] = time.monotonic()

    def on_train_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Start the training clock."""
        self._begin("train")

    def on_train_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Stop the training clock."""
        self._stop("train")

    def on_sanity_check_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Start the sanity check's clock."""
        self._begin("sanity_check")

    def on_sanity_check_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Stop the sanity check's clock."""
        self._stop("sanity_check")

    def on_validation_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Start the validation clock."""
        self._begin("validate")

    def on_validation_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Stop the validation clock."""
        self._stop("validate")

    def on_test_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Start the test clock."""
        self._begin("test")

    def on_test_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Stop the test clock."""
        self._stop("test")

    def on_predict_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Start the predict clock."""
        self._begin("predict")

    def on_predict_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Stop the predict clock."""
        self._stop("predict")

    def on_fit_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """A run resumed with its time already used up stops at once."""
        if self._duration is not None:
            self._check(trainer)

    def on_train_batch_end(self, trainer: TrainerLike, pl_module: Any,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        """With ``interval="step"``: stop when the time is up."""
        if self._interval == "step" and self._duration is not None:
            self._check(trainer)

    def on_train_epoch_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """With ``interval="epoch"``: stop when the time is up."""
        if self._interval == "epoch" and self._duration is not None:
            self._check(trainer)

    def _check(self, trainer: TrainerLike) -> None:
        # each rank's own clock: a stop wished on any rank is agreed by all before it takes effect (no collective
        # here, which would cost a round trip every batch)
        up = self.time_elapsed("train") >= self._duration
        if up and not trainer.should_stop:
            trainer.should_stop = True
            if self._verbose and trainer.is_global_zero:
                elapsed = timedelta(seconds=int(self.time_elapsed("train")))
                console.info(f"Time limit reached. Elapsed time is {elapsed}. Signaling Trainer to stop.")

    def state_dict(self) -> dict[str, Any]:
        """The seconds spent in each stage."""
        return {"time_elapsed": {stage: self.time_elapsed(stage) for stage in STAGES}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Count training time on from the saved run's."""
        self._offset = float(state_dict.get("time_elapsed", {}).get("train", 0.0))


def _known(stage: str) -> str:
    if stage not in STAGES:
        raise MisconfigurationError(f"Timer: stage={describe(stage)}; accepted: {', '.join(map(repr, STAGES))}.")
    return stage
