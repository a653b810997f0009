"""``CSVLogger``: metrics in ``metrics.csv`` and hyperparameters in ``hparams.yaml``."""

import csv
import io
import itertools
import os
import warnings
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from framework.io.fs import append_text, filesystem, make_dirs, names_in, read_bytes, remove, write_bytes_atomic
from framework.loggers.base import rank_zero_experiment
from framework.loggers.directory import DirectoryLogger, as_dict
from framework.utilities.rank_zero import rank_zero_only


class CSVLogger(DirectoryLogger):
    """Writes ``<save_dir>/<name>/version_<n>/metrics.csv``: one row per ``log_metrics`` call.

    Columns are ``epoch``, ``step`` and every metric name seen so far, in alphabetical order
    (as Lightning writes them); when a new name appears the file is rewritten with the wider
    header, atomically, so no row is lost and a crash leaves a readable file. Rows are
    buffered and written every ``flush_logs_every_n_steps`` steps and when the run ends;
    ``log_hyperparams`` writes ``hparams.yaml`` at once. Files are written on global rank 0
    only; elsewhere ``experiment`` is a ``NoOpExperiment``.

    A version folder that already holds files (``version=`` naming an earlier run's) is
    warned about when the logger first writes (or ``experiment`` is first read), and that
    run's ``metrics.csv`` and ``hparams.yaml`` are moved aside to ``<file>.previous`` (then
    ``.previous-1`` ...) at once: this run's files start afresh, yet a run that fails loses no
    earlier log. The files moved aside are deleted once this run ends with ``"success"``.

    :param save_dir: the directory the experiments go under (local, or an fsspec URL).
    :param name: the experiment's folder under ``save_dir`` (default ``"lightning_logs"``); ``None`` or ``""``:
        the versions go straight into ``save_dir``.
    :param version: an int (the folder ``version_<n>``) or a string (the folder's name); ``None`` (default): one
        past the highest ``version_<n>`` there, decided on first use.
    :param prefix: put before each metric's name, joined with ``-`` (default ``""``: none).
    :param flush_logs_every_n_steps: write the buffered rows when a row's ``step + 1`` is a multiple of this
        (default 100).

    Example::

        trainer = Trainer(logger=CSVLogger("logs", name="digits"))
        # ... logs/digits/version_0/metrics.csv, logs/digits/version_0/hparams.yaml
    """

    #: The file in the run directory the metrics are written to, a row per step.
    NAME_METRICS_FILE = "metrics.csv"
    _REPLACED = ("metrics.csv", "hparams.yaml")  # what a new run writes afresh in a reused folder

    def __init__(self, save_dir: str | os.PathLike, name: str | None = "lightning_logs",
                 version: int | str | None = None, prefix: str = "", flush_logs_every_n_steps: int = 100) -> None:
        super().__init__(save_dir, name, version, prefix)
        self._flush_every = flush_logs_every_n_steps
        self._pending: list[dict[str, Any]] = []
        self._columns: list[str] = []
        self._written = False  # whether this logger wrote metrics.csv yet
        self._claimed = False  # whether the run's folder was taken (an earlier run's files moved aside)
        self._moved_aside: list[str] = []  # an earlier run's files, to delete once this run succeeds
        self._rows_written = 0  # the rows metrics.csv holds

    @property
    @rank_zero_experiment
    def experiment(self) -> "CSVLogger":
        """The writer itself (Lightning's ``logger.experiment.log_metrics(...)`` works on it); a
        ``NoOpExperiment`` on global ranks other than 0. The first read takes the run's folder (see above)."""
        if not self._claimed:
            self._claim_folder()
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
        """Also whether ``metrics.csv`` was written and with which columns, so later rows are added to it, and
        whether the folder was taken, so this run's own files are not taken for an earlier run's."""
        return {**super().run_state(), "written": self._written, "columns": self._columns,
                "claimed": self._claimed, "moved_aside": self._moved_aside, "rows": self._rows_written}

    def load_run_state(self, state: dict[str, Any]) -> None:
        """Take in what ``run_state`` returned in another process."""
        super().load_run_state(state)
        self._written, self._columns = state["written"], state["columns"]
        self._claimed, self._moved_aside = state["claimed"], state["moved_aside"]
        self._rows_written = state.get("rows", 0)

    def checkpoint_position(self) -> dict[str, Any]:
        """The folder and how many rows ``metrics.csv`` holds, once the buffered ones are written."""
        if rank_zero_only.rank != 0 or not self._claimed:  # type: ignore[attr-defined]
            return {}
        self.save()
        return {"log_dir": self.log_dir, "rows": self._rows_written}

    def resume_at(self, position: dict[str, Any], epoch_end_row: dict[str, Any] | None = None) -> None:
        """Resuming in the folder an interrupted run wrote: go on from its first ``rows`` rows (those logged up
        to its checkpoint), which are copied from the file moved aside into this run's ``metrics.csv``, then
        ``epoch_end_row`` (see ``Logger.resume_at``), which came after them."""
        if rank_zero_only.rank != 0 or position.get("log_dir") != self.log_dir:  # type: ignore[attr-defined]
            return
        _ = self.experiment  # takes the folder: the interrupted run's metrics.csv is moved aside
        earlier = [path for path in self._moved_aside if os.path.basename(path).startswith(self.NAME_METRICS_FILE)]
        if not earlier or self._written:
            return
        text = read_bytes(earlier[-1]).decode("utf-8")
        reader = csv.DictReader(io.StringIO(text, newline=""))
        rows = list(itertools.islice(reader, position["rows"]))
        self._columns = list(reader.fieldnames or [])
        write_bytes_atomic(self.metrics_file, _csv_text(self._columns, rows, header=True).encode("utf-8"))
        self._written, self._rows_written = True, len(rows)
        if epoch_end_row:
            self.log_metrics(epoch_end_row["metrics"], epoch_end_row["step"])
            self.save()

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None = None, *args: Any, **kwargs: Any) -> None:
        """Add ``params`` (a dict or an ``argparse.Namespace``) to ``hparams.yaml`` and write it now (``{}`` with
        none), as Lightning's; nothing on global ranks other than 0."""
        params = as_dict(params)  # checked on every rank, so a mistake fails everywhere alike
        if rank_zero_only.rank != 0:  # type: ignore[attr-defined]
            return
        _ = self.experiment
        super().log_hyperparams(params)
        self.write_hparams()

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Buffer one row: ``metrics`` at ``step`` (nothing on global ranks other than 0)."""
        _ = self.experiment
        if step is None:
            step = len(self._pending)
        row = {key: _number(value) for key, value in self.with_prefix(metrics).items()}
        row["step"] = step
        self._pending.append(row)
        if (step + 1) % self._flush_every == 0:
            self.save()

    @rank_zero_only
    def save(self) -> None:
        """Write the buffered rows, and ``hparams.yaml`` once hyperparameters were logged (as Lightning)."""
        _ = self.experiment
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
            self._written, self._rows_written = True, len(old_rows) + len(rows)
        else:
            append_text(path, _csv_text(self._columns, rows, header=False))
            self._rows_written += len(rows)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Write what is buffered; after ``"success"`` delete the earlier run's files this run moved aside."""
        if not self._claimed:
            return  # nothing was logged: the folder stays as it is
        self.save()
        if status == "success":
            for path in self._moved_aside:
                remove(path)
            self._moved_aside = []

    def _claim_folder(self) -> None:
        self._claimed = True
        log_dir = self.log_dir
        names = names_in(log_dir)
        if names:
            moved = [(name, _free_name(name, names)) for name in self._REPLACED if name in names]
            what = (" and ".join(f"its {old} is moved to {new}" for old, new in moved)
                    + ", to be deleted once this run ends successfully") if moved else "nothing in it is replaced"
            warnings.warn(f"Experiment logs directory {log_dir} exists and is not empty (an earlier run's, "
                          f"version={self.version!r}): {what}; this run writes its own metrics.csv and "
                          "hparams.yaml. Pass another version, or none, for a folder of its own.",
                          UserWarning, stacklevel=4)
            fs, inner = filesystem(log_dir)
            for old, new in moved:
                fs.mv(f"{inner}/{old}", f"{inner}/{new}")
                self._moved_aside.append(os.path.join(log_dir, new))
        make_dirs(log_dir)


def _free_name(name: str, taken: list[str]) -> str:
    """``<name>.previous``, or ``<name>.previous-<n>`` with the first ``n`` not in ``taken``."""
    candidate, number = f"{name}.previous", 0
    while candidate in taken:
        number += 1
        candidate = f"{name}.previous-{number}"
    taken.append(candidate)
    return candidate


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
