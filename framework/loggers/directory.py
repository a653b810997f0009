"""Loggers whose runs live in ``<save_dir>/<name>/version_<n>``, each with an ``hparams.yaml``."""

from __future__ import annotations

import json
import os
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from framework.checks import is_int
from framework.errors import MisconfigurationError, describe
from framework.hparams import yaml_form
from framework.io.fs import append_text, make_dirs, names_in, write_bytes_atomic
from framework.loggers.base import Logger, with_prefix
from framework.utilities.rank_zero import rank_zero_only


class DirectoryLogger(Logger):
    """A run directory per version: ``<save_dir>/<name>/version_<n>`` (``n`` one past the highest there).

    The version is decided on first use, so two Trainers made one after the other write to
    different directories. ``version`` may be given as an int (``version_3``) or a string
    (used as the directory name).
    """

    #: The file in the run directory that ``log_hyperparams`` writes.
    NAME_HPARAMS_FILE = "hparams.yaml"

    def __init__(self, save_dir: str | os.PathLike, name: str | None = "lightning_logs",
                 version: int | str | None = None, prefix: str = "") -> None:
        if not isinstance(save_dir, (str, os.PathLike)):
            raise MisconfigurationError(f"{type(self).__name__}(save_dir={describe(save_dir)}): accepted is a path.")
        if version is not None and not (is_int(version) or isinstance(version, str)):
            raise MisconfigurationError(
                f"{type(self).__name__}(version={describe(version)}): accepted is an int, a string or None."
            )
        self._save_dir = os.fspath(save_dir)
        self._name = name or ""
        self._version = version
        self._prefix = prefix
        self.hparams: dict[str, Any] = {}
        self.hparams_logged = False  # whether log_hyperparams was called (even with nothing)
        self._hparams_written: dict[str, Any] | None = None  # what hparams.yaml holds, None before the first write

    @property
    def name(self) -> str:
        """The experiment's name: the folder under ``save_dir`` holding its versions."""
        return self._name

    @property
    def save_dir(self) -> str:
        """The folder every experiment of this logger lives under."""
        return self._save_dir

    @property
    def root_dir(self) -> str:
        """``<save_dir>/<name>`` (``save_dir`` alone without a name): where the versions of this experiment are.

        Built from the ``save_dir`` and ``name`` properties, so a subclass overriding them moves the run.
        """
        name = self.name
        return os.path.join(self.save_dir, name) if name else self.save_dir

    @property
    def version(self) -> int | str:
        """This run's version: the one given, else one past the highest ``version_<n>`` in ``root_dir``."""
        if self._version is None:
            self._version = self._next_version()
        return self._version

    @property
    def log_dir(self) -> str:
        """This run's folder: ``<root_dir>/version_<n>`` (or ``<root_dir>/<version>`` for a string)."""
        version = self.version
        return os.path.join(self.root_dir, version if isinstance(version, str) else f"version_{version}")

    def _next_version(self) -> int:
        numbers = [int(name[len("version_"):]) for name in names_in(self.root_dir)
                   if name.startswith("version_") and name[len("version_"):].isdigit()]
        return max(numbers) + 1 if numbers else 0

    def run_state(self) -> dict[str, Any]:
        """The run's version (decided now if it was not yet). Hyperparameters are logged again by every run."""
        return {"version": self.version}

    def load_run_state(self, state: dict[str, Any]) -> None:
        """Take in what ``run_state`` returned in another process."""
        self._version = state["version"]

    def with_prefix(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """``metrics`` with ``prefix-`` before each name when a prefix was given."""
        return with_prefix(metrics, self._prefix)

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None = None, *args: Any, **kwargs: Any) -> None:
        """Remember ``params`` (a dict or an ``argparse.Namespace``) for ``hparams.yaml``, written by ``save``."""
        self.hparams.update(as_dict(params))
        self.hparams_logged = True

    @rank_zero_only
    def log_restart(self, record: dict[str, Any]) -> None:
        """Add ``record`` as one JSON line to ``restarts.jsonl`` in the run's folder."""
        make_dirs(self.log_dir)
        append_text(os.path.join(self.log_dir, "restarts.jsonl"), json.dumps(record) + "\n")

    def write_hparams(self) -> None:
        """Write ``hparams.yaml`` in the run's folder when it changed (plain YAML: other values as their ``repr``).

        Keys are sorted, as Lightning writes them; the file exists, as ``{}``, even with none.
        """
        import yaml

        current = yaml_form(self.hparams)
        if current == self._hparams_written:
            return
        make_dirs(self.log_dir)
        text = yaml.safe_dump(current)
        write_bytes_atomic(os.path.join(self.log_dir, self.NAME_HPARAMS_FILE), text.encode("utf-8"))
        self._hparams_written = current


def as_dict(params: Mapping[str, Any] | Namespace | None) -> dict[str, Any]:
    """Hyperparameters given as a dict, an ``argparse.Namespace`` or None, as a dict."""
    if params is None:
        return {}
    if isinstance(params, Namespace):
        return dict(vars(params))
    if not isinstance(params, Mapping):
        raise MisconfigurationError(
            f"log_hyperparams(params={describe(params)}): accepted is a dict, an argparse.Namespace or None."
        )
    return dict(params)


def log_dir_of(loggers: list[Any], default_root_dir: str) -> str | None:
    """``trainer.log_dir`` by Lightning's rule: the first logger's run directory for CSV and TensorBoard loggers,
    the ``save_dir`` of any other (None where it has none); ``default_root_dir`` without a logger."""
    if not loggers:
        return default_root_dir
    logger = loggers[0]
    return logger.log_dir if isinstance(logger, DirectoryLogger) else logger.save_dir
