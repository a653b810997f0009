"""``RichProgressBar``: the progress bars drawn with rich (``pip install "framework[rich]"``)."""

import math
import time
from dataclasses import dataclass
from typing import Any

from framework.callbacks.progress import StageProgressBar
from framework.errors import require_package
from framework.protocols import TrainerLike


@dataclass
class RichProgressBarTheme:
    """The styles of ``RichProgressBar``'s columns (any rich style: a colour, ``"bold"``, ``"dim underline"``...)
    and how metrics are written; ``""`` is no style.

    :param description: the stage's label (``Epoch 3``, ``Validation``...).
    :param progress_bar: the bar while it fills.
    :param progress_bar_finished: the bar once full.
    :param progress_bar_pulse: the bar while the total is unknown (a loader without a length).
    :param batch_progress: the ``done/total`` batch counts.
    :param time: the elapsed and remaining time.
    :param processing_speed: the batches per second.
    :param metrics: the metrics' text.
    :param metrics_text_delimiter: what separates two metrics (default ``" "``).
    :param metrics_format: the format spec of float metrics (default ``".3f"``).

    Example::

        RichProgressBar(theme=RichProgressBarTheme(progress_bar="green", metrics_format=".2e"))
    """

    description: str = ""
    progress_bar: str = "#6206E0"
    progress_bar_finished: str = "#6206E0"
    progress_bar_pulse: str = "#6206E0"
    batch_progress: str = ""
    time: str = "dim"
    processing_speed: str = "dim underline"
    metrics: str = "italic"
    metrics_text_delimiter: str = " "
    metrics_format: str = ".3f"


class RichProgressBar(StageProgressBar):
    """Bars drawn with rich: description, bar, ``batches/total``, elapsed and remaining time, speed and the
    metrics (``v_num`` and those logged with ``prog_bar=True``).

    As ``TQDMProgressBar``: redrawn every ``refresh_rate`` batches and at most ten times a second, one line per
    epoch or per run when the console is not a terminal, nothing on ranks other than 0. Needs ``rich``.

    :param refresh_rate: redraw every this many batches (default 1); 0 turns the bars off.
    :param leave: True keeps each epoch's training bar and each validation bar on the screen; False (default)
        keeps only the last training bar. Test and predict bars stay either way.
    :param theme: the columns' styles (a :class:`~framework.callbacks.RichProgressBarTheme`); ``None`` (default):
        its defaults.
    :param console_kwargs: keyword arguments for the ``rich.console.Console`` that draws (default: none).

    Example::

        Trainer(callbacks=[RichProgressBar(leave=True)])
    """

    def __init__(self, refresh_rate: int = 1, leave: bool = False, theme: RichProgressBarTheme | None = None,
                 console_kwargs: dict[str, Any] | None = None) -> None:
        require_package("rich", "RichProgressBar", extra="rich")
        super().__init__(refresh_rate=refresh_rate, leave=leave)
        self.theme = theme if theme is not None else RichProgressBarTheme()
        self._console_kwargs = dict(console_kwargs or {})
        self._console: Any = None
        self._progress: Any = None  # a rich Progress while bars are shown
        self._tasks: dict[str, Any] = {}  # stage -> its task in the Progress

    @property
    def progress(self) -> Any:
        """The ``rich.progress.Progress`` drawing the bars (None when none is shown)."""
        return self._progress

    @property
    def train_progress_bar_id(self) -> Any:
        """The training bar's task in ``progress`` (None when there is none)."""
        return self._tasks.get("train")

    @property
    def val_progress_bar_id(self) -> Any:
        """The validation bar's task (the sanity check's while it runs)."""
        return self._tasks.get("validate")

    @property
    def test_progress_bar_id(self) -> Any:
        """The test bar's task."""
        return self._tasks.get("test")

    @property
    def predict_progress_bar_id(self) -> Any:
        """The predict bar's task."""
        return self._tasks.get("predict")

    def teardown(self, trainer: TrainerLike, pl_module: Any, stage: str) -> None:
        """Stop drawing: what was left on the screen stays there."""
        self._stop_drawing()

    def on_exception(self, trainer: TrainerLike, pl_module: Any, exception: BaseException) -> None:
        """Stop drawing so the traceback is not drawn over."""
        super().on_exception(trainer, pl_module, exception)
        self._stop_drawing()

    def _on_a_terminal(self) -> bool:
        from rich.console import Console

        self._console = Console(**self._console_kwargs)
        return self._console.is_terminal

    def _print_line(self, line: str) -> None:
        print(line, file=self._console.file, flush=True)

    def _open_bar(self, stage: str, label: str, total: float) -> None:
        if self._progress is None:
            self._progress = self._new_progress()
            self._progress.start()
        self._tasks[stage] = self._progress.add_task(
            label, total=None if total == math.inf else total, of="?" if total == math.inf else str(int(total)),
            clock="", speed="", metrics="",
        )
        self._progress.refresh()

    def _draw_bar(self, stage: str, done: int, metrics: dict[str, Any]) -> None:
        elapsed = max(time.monotonic() - self._started[stage], 1e-9)
        total = self._totals[stage]
        left = elapsed / done * (total - done) if done and total != math.inf else None
        self._progress.update(
            self._tasks[stage], completed=done, speed=f"{done / elapsed:.2f}it/s", metrics=self._metrics_text(metrics),
            clock=f"{_clock(elapsed)} • {_clock(left)}",
        )
        self._progress.refresh()

    def _close_bar(self, stage: str, leave: bool) -> None:
        task = self._tasks.pop(stage)
        if not leave:
            self._progress.remove_task(task)
        self._progress.refresh()

    def _new_progress(self) -> Any:
        from rich.progress import BarColumn, Progress, TextColumn

        theme = self.theme
        return Progress(
            TextColumn("{task.description}", style=theme.description),
            BarColumn(complete_style=theme.progress_bar, finished_style=theme.progress_bar_finished,
                      pulse_style=theme.progress_bar_pulse),
            TextColumn("{task.completed}/{task.fields[of]}", style=theme.batch_progress),
            TextColumn("{task.fields[clock]}", style=theme.time),
            TextColumn("{task.fields[speed]}", style=theme.processing_speed),
            TextColumn("{task.fields[metrics]}", style=theme.metrics, markup=False),
            console=self._console, auto_refresh=False,
        )

    def _metrics_text(self, metrics: dict[str, Any]) -> str:
        form = self.theme.metrics_format
        parts = [f"{key}: {value:{form}}" if isinstance(value, float) else f"{key}: {value}"
                 for key, value in metrics.items()]
        return self.theme.metrics_text_delimiter.join(parts)

    def _stop_drawing(self) -> None:
        for stage in list(self._totals):
            self._stop(stage, leave=True)
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"
