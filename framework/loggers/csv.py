"""``CSVLogger``: metrics in ``metrics.csv`` and hyperparameters in ``hparams.yaml``."""

from __future__ import annotations

import csv
import io
import os
import warnings
from typing import Any

from framework.io.fs import append_text, is_dir, names_in, read_bytes, write_bytes_atomic
from framework.loggers.directory import DirectoryLogger


class CSVLogger(DirectoryLogger):
    """Writes ``<save_dir>/<name>/version_<n>/metrics.csv``: one row per ``log_metrics`` call.

    Columns are ``epoch``, ``step`` and every metric name seen so far, in alphabetical order
    (as Lightning writes them); when a new name appears the file is rewritten with the wider
    header, atomically, so no row is lost and a crash leaves a readable file. Rows are
    buffered and written every ``flush_logs_every_n_steps`` steps and when the run ends.

    Example::

        trainer = Trainer(logger=CSVLogger("logs", name="digits"))
        # ... logs/digits/version_0/metrics.csv, logs/digits/version_0/hparams.yaml
    """

    NAME_METRICS_FILE = "metrics.csv"

    def __init__(self, save_dir: str | os.PathLike, name: str | None = "lightning_logs",
                 version: int | str | None = None, prefix: str = "", flush_logs_every_n_steps: int = 100) -> None:
        super().__init__(save_dir, name, version, prefix)
        self._flush_every = flush_logs_every_n_steps
        self._pending: list[dict[str, Any]] = []
        self._columns: list[str] = []
        self._written = False  # whether this logger wrote metrics.csv yet
        self._checked_dir = False  # whether the run's folder was looked at for an earlier run's files

    @property
    def experiment(self) -> CSVLogger:
        """The writer itself (Lightning's ``logger.experiment.log_metrics(...)`` works on it)."""
        return self

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """The rows logged and not yet written (``save`` empties it), as Lightning's ``logger.experiment.metrics``."""
        return self._pending

    @property
    def metrics_keys(self) -> list[str]:
        """The columns of ``metrics.csv`` so far, as Lightning's writer names them."""
        return self._columns

    @property
    def metrics_file(self) -> str:
        """The path of this run's ``metrics.csv``."""
        return os.path.join(self.log_dir, self.NAME_METRICS_FILE)

    @property
    def metrics_file_path(self) -> str:
        """``metrics_file``, by the name Lightning's ``logger.experiment`` gives it."""
        return self.metrics_file

    def run_state(self) -> dict[str, Any]:
        """Also whether ``metrics.csv`` was written and with which columns, so later rows are added to it."""
        return {**super().run_state(), "written": self._written, "columns": self._columns}

    def load_run_state(self, state: dict[str, Any]) -> None:
        """Take in what ``run_state`` returned in another process."""
        super().load_run_state(state)
        self._written, self._columns = state["written"], state["columns"]

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Buffer one row: ``metrics`` at ``step``."""
        if step is None:
            step = len(self._pending)
        row = {key: _number(value) for key, value in self.with_prefix(metrics).items()}
        row["step"] = step
        self._pending.append(row)
        if (step + 1) % self._flush_every == 0:
            self.save()

    def save(self) -> None:
        """Write the buffered rows, and ``hparams.yaml`` once hyperparameters were logged (as Lightning)."""
        if not self._checked_dir:
            self._checked_dir = True
            if not self._written and is_dir(self.log_dir) and names_in(self.log_dir):
                warnings.warn(f"Experiment logs directory {self.log_dir} exists and is not empty: it holds an "
                              f"earlier run's files (version={self.version!r}), and this run's metrics.csv and "
                              "hparams.yaml replace theirs. Pass another version, or none for a new version folder.",
                              stacklevel=2)
        if self.hparams_logged:
            self.write_hparams()
        if not self._pending:
            return
        rows, self._pending = self._pending, []
        new_columns = set().union(*rows) - set(self._columns)
        path = self.metrics_file
        if new_columns or not self._written:
            self._columns = sorted(set(self._columns) | new_columns)
            old_rows = _read_rows(path) if self._written else []
            write_bytes_atomic(path, _csv_text(self._columns, old_rows + rows, header=True).encode("utf-8"))
            self._written = True
        else:
            append_text(path, _csv_text(self._columns, rows, header=False))


def _number(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _read_rows(path: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(read_bytes(path).decode("utf-8"), newline="")))


def _csv_text(columns: list[str], rows: list[dict[str, Any]], header: bool) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()
