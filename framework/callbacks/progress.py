"""Progress bars: the base every bar derives from, and ``TQDMProgressBar`` (bars on a terminal, one line per
epoch or per run everywhere else)."""

import math
import sys
import time
from typing import Any

from framework.callbacks.base import Callback
from framework.checks import check_int
from framework.protocols import TrainerLike

_REDRAW_EVERY = 0.1  # seconds


class ProgressBar(Callback):
    """What every progress bar shows next to the counts: ``v_num`` (the logger's version) and the
    values logged with ``prog_bar=True``; and the counts themselves, under Lightning's names."""

    _trainer: TrainerLike | None = None

    def setup(self, trainer: TrainerLike, pl_module: Any, stage: str) -> None:
        """Remember the Trainer (``self.trainer``)."""
        self._trainer = trainer

    @property
    def trainer(self) -> Any:
        """The Trainer this bar reports on (known from ``setup`` on).

        :raises TypeError: where read before ``setup`` has run (no Trainer is attached).
        """
        if self._trainer is None:
            raise TypeError(f"The `trainer` reference of {type(self).__name__} is set in setup(), which has not run "
                            "yet: the bar is not attached to a running Trainer.")
        return self._trainer

    @property
    def total_train_batches(self) -> float:
        """Training batches per epoch (``inf`` for a loader without a length)."""
        return self.trainer.num_training_batches

    @property
    def total_val_batches(self) -> float:
        """Validation batches of the current run over all loaders (the sanity check's while it runs; during fit,
        0 in an epoch that ``check_val_every_n_epoch`` does not validate)."""
        trainer = self.trainer
        if trainer.sanity_checking:
            return _total(trainer.num_sanity_val_batches)
        every_n = trainer.check_val_every_n_epoch
        if trainer.state.fn == "fit" and every_n is not None and (trainer.current_epoch + 1) % every_n:
            return 0
        return _total(trainer.num_val_batches)

    @property
    def total_test_batches(self) -> float:
        """Test batches over all loaders."""
        return _total(self.trainer.num_test_batches)

    @property
    def total_predict_batches(self) -> float:
        """Predict batches over all loaders."""
        return _total(self.trainer.num_predict_batches)

    def get_metrics(self, trainer: TrainerLike, pl_module: Any) -> dict[str, Any]:
        """The values to show: ``{"v_num": version, **trainer.progress_bar_metrics}``."""
        shown: dict[str, Any] = {}
        version = trainer.logger.version if trainer.logger is not None else None
        if version is not None:
            shown["v_num"] = version
        shown.update(trainer.progress_bar_metrics)
        return shown


class StageProgressBar(ProgressBar):
    """What the built-in bars share: a bar per stage (training epoch, validation, test, predict) on a terminal,
    one line per training epoch and per validate/test/predict run everywhere else (a log file, CI, a notebook
    capture), so logs do not fill with redraws. Only global rank 0 shows anything.

    Bars are redrawn every ``refresh_rate`` batches (0 turns the bar off), at most ten times a second whatever
    the rate, so a fast loop does not wait on the display. Subclasses draw: ``_open_bar``, ``_draw_bar`` and
    ``_close_bar``.
    """

    def __init__(self, refresh_rate: int = 1, leave: bool = False) -> None:
        check_int(type(self).__name__, "refresh_rate", refresh_rate, 0, meaning=" (0 turns it off)")
        self.refresh_rate = refresh_rate
        self.leave = leave
        self._enabled = True
        self._terminal = False
        self._totals: dict[str, float] = {}  # stage -> batches in it, for the stages that have a bar now
        self._started: dict[str, float] = {}  # stage -> time.monotonic() at its start, for the summary lines
        self._seen: dict[str, int] = {}  # stage -> batches done
        self._last_redraw = 0.0

    @property
    def is_enabled(self) -> bool:
        """Whether this bar shows anything in this process."""
        return self._enabled and self.refresh_rate > 0

    @property
    def is_disabled(self) -> bool:
        """The opposite of ``is_enabled``."""
        return not self.is_enabled

    def enable(self) -> None:
        """Show progress again."""
        self._enabled = True

    def disable(self) -> None:
        """Show nothing (the Trainer does this on every rank but 0)."""
        self._enabled = False

    def setup(self, trainer: TrainerLike, pl_module: Any, stage: str) -> None:
        """Decide, once per run, whether this process shows bars, lines, or nothing."""
        super().setup(trainer, pl_module, stage)
        if not trainer.is_global_zero:
            self.disable()
        self._terminal = self._on_a_terminal()

    # -- training ---
    def on_train_epoch_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """A fresh training bar for the epoch."""
        self._start("train", f"Epoch {trainer.current_epoch}", trainer.num_training_batches)

    def on_train_batch_end(self, trainer: TrainerLike, pl_module: Any,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        """Count the batch; redraw every ``refresh_rate`` batches."""
        self._advance("train", batch_idx + 1, trainer, pl_module)

    def on_train_epoch_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """The epoch's final counts and metrics (validation's included): a last redraw, or the epoch's line."""
        self._finish("train", trainer, pl_module, close=False)

    def on_train_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Close the training bar, leaving the last epoch's on the screen (as Lightning does)."""
        self._stop("train", leave=True)

    # -- evaluation ---
    def on_validation_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """A bar for the validation run (in fit it goes under the training bar and disappears after)."""
        label = "Sanity Checking" if trainer.sanity_checking else "Validation"
        self._start("validate", label, _total(trainer.num_sanity_val_batches if trainer.sanity_checking
                                                else trainer.num_val_batches))

    def on_validation_batch_end(self, trainer: TrainerLike, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        """Count the batch."""
        self._advance("validate", self._seen.get("validate", 0) + 1, trainer, pl_module)

    def on_validation_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Close the validation bar; a line for a standalone ``validate`` (inside fit the epoch's line tells)."""
        self._finish("validate", trainer, pl_module, close=True, line=trainer.state.fn == "validate")
        if "train" in self._totals:  # show the new validation metrics on the training bar
            self._draw_bar("train", self._seen.get("train", 0), self.get_metrics(trainer, pl_module))

    def on_test_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """A bar for the test run."""
        self._start("test", "Testing", _total(trainer.num_test_batches))

    def on_test_batch_end(self, trainer: TrainerLike, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        """Count the batch."""
        self._advance("test", self._seen.get("test", 0) + 1, trainer, pl_module)

    def on_test_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Close the test bar, or print the run's line."""
        self._finish("test", trainer, pl_module, close=True)

    def on_predict_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """A bar for the predict run."""
        self._start("predict", "Predicting", _total(trainer.num_predict_batches))

    def on_predict_batch_end(self, trainer: TrainerLike, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                             dataloader_idx: int = 0) -> None:
        """Count the batch."""
        self._advance("predict", self._seen.get("predict", 0) + 1, trainer, pl_module)

    def on_predict_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Close the predict bar, or print the run's line."""
        self._finish("predict", trainer, pl_module, close=True, with_metrics=False)

    def on_exception(self, trainer: TrainerLike, pl_module: Any, exception: BaseException) -> None:
        """Close every bar so the traceback is not drawn over."""
        for stage in list(self._totals):
            self._stop(stage, leave=True)

    # -- what subclasses draw ---
    def _on_a_terminal(self) -> bool:
        """Whether this process draws bars (rather than printing lines)."""
        return _is_terminal(sys.stdout)

    def _open_bar(self, stage: str, label: str, total: float) -> None:
        """Show a bar for ``stage`` (``total`` is ``inf`` for a loader without a length)."""
        raise NotImplementedError

    def _draw_bar(self, stage: str, done: int, metrics: dict[str, Any]) -> None:
        """Redraw ``stage``'s bar at ``done`` batches, with ``metrics`` beside it."""
        raise NotImplementedError

    def _close_bar(self, stage: str, leave: bool) -> None:
        """Take ``stage``'s bar away, leaving its last state on the screen when ``leave``."""
        raise NotImplementedError

    def _print_line(self, line: str) -> None:
        print(line, file=sys.stdout, flush=True)

    # -- the mechanics ---
    def _start(self, stage: str, label: str, total: float) -> None:
        if not self.is_enabled:
            return
        self._seen[stage] = 0
        self._started[stage] = time.monotonic()
        if not self._terminal:
            return
        self._stop(stage, leave=self.leave)
        self._totals[stage] = total
        self._open_bar(stage, label, total)

    def _advance(self, stage: str, done: int, trainer: TrainerLike, module: Any) -> None:
        if not self.is_enabled:
            return
        self._seen[stage] = done
        total = self._totals.get(stage)
        if total is None or done % self.refresh_rate and done != total:
            return
        # At most ten redraws a second: reading the metrics to show waits for the device.
        now = time.monotonic()
        if now - self._last_redraw < _REDRAW_EVERY and done != total:
            return
        self._last_redraw = now
        self._draw_bar(stage, done, self.get_metrics(trainer, module))

    def _finish(self, stage: str, trainer: TrainerLike, module: Any, close: bool, line: bool = True,
                with_metrics: bool = True) -> None:
        if not self.is_enabled:
            return
        metrics = self.get_metrics(trainer, module) if with_metrics else {}
        if stage in self._totals:
            self._draw_bar(stage, self._seen.get(stage, 0), metrics)
            if close:
                self._stop(stage, leave=stage not in ("train", "validate") or self.leave)
        elif line and not trainer.sanity_checking and stage in self._started:
            self._print_line(self._line(stage, trainer, metrics))

    def _line(self, stage: str, trainer: TrainerLike, metrics: dict[str, Any]) -> str:
        label = {"train": f"Epoch {trainer.current_epoch}", "validate": "Validation", "test": "Testing",
                 "predict": "Predicting"}[stage]
        elapsed = time.monotonic() - self._started[stage]
        parts = [f"{label}: {self._seen.get(stage, 0)} batches in {elapsed:.1f}s"]
        parts += [f"{key}={_short(value)}" for key, value in sorted(metrics.items())]
        return ", ".join(parts)

    def _stop(self, stage: str, leave: bool) -> None:
        if self._totals.pop(stage, None) is not None:
            self._close_bar(stage, leave)


class TQDMProgressBar(StageProgressBar):
    """A tqdm bar for training (``Epoch 3: 40/100 [… loss=0.12, v_num=0]``), validation, testing and predicting.

    Bars are redrawn every ``refresh_rate`` batches (0 turns the bar off), at most ten times a
    second whatever the rate, so a fast loop does not wait on the display. When standard
    output is not a terminal (a log file, CI, a notebook capture) there are no bars: one line
    per training epoch, and one per validate/test/predict run, so logs do not fill with
    carriage returns. Only global rank 0 shows anything.

    :param refresh_rate: redraw every this many batches (default 1); 0 turns the bars off.
    :param process_position: offsets the bars by ``2 * process_position`` lines, for the bars of several
        processes in one terminal (default 0).
    :param leave: True keeps each epoch's training bar and each validation bar on the screen; False (default)
        keeps only the last training bar. Test and predict bars stay either way.

    Example::

        Trainer(callbacks=[TQDMProgressBar(refresh_rate=10)])
    """

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False) -> None:
        super().__init__(refresh_rate=refresh_rate, leave=leave)
        self.process_position = process_position
        self._bars: dict[str, Any] = {}  # stage -> tqdm bar, in terminal mode

    @property
    def train_progress_bar(self) -> Any:
        """The tqdm bar of the training epoch (there is one on a terminal, while training runs)."""
        return self._bar("train", "train_progress_bar")

    @property
    def val_progress_bar(self) -> Any:
        """The tqdm bar of the validation run."""
        return self._bar("validate", "val_progress_bar")

    @property
    def test_progress_bar(self) -> Any:
        """The tqdm bar of the test run."""
        return self._bar("test", "test_progress_bar")

    @property
    def predict_progress_bar(self) -> Any:
        """The tqdm bar of the predict run."""
        return self._bar("predict", "predict_progress_bar")

    def _bar(self, stage: str, name: str) -> Any:
        bar = self._bars.get(stage)
        if bar is None:
            raise TypeError(f"{type(self).__name__}.{name} does not exist now: a bar is drawn only on a terminal, "
                            "while its stage runs.")
        return bar

    def _open_bar(self, stage: str, label: str, total: float) -> None:
        from tqdm.auto import tqdm

        position = 1 if stage == "validate" else 0
        self._bars[stage] = tqdm(
            desc=label, total=None if total == math.inf else int(total), position=2 * self.process_position + position,
            leave=True, dynamic_ncols=True, file=sys.stdout, smoothing=0,
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]",
        )

    def _draw_bar(self, stage: str, done: int, metrics: dict[str, Any]) -> None:
        bar = self._bars[stage]
        bar.n = done
        bar.set_postfix(metrics, refresh=False)
        bar.refresh()

    def _close_bar(self, stage: str, leave: bool) -> None:
        bar = self._bars.pop(stage)
        bar.leave = leave
        bar.close()


def _is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _total(counts: list[float]) -> float:
    return sum(counts) if counts else 0


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
