"""``TensorBoardLogger``: scalars, hyperparameters and the model graph as TensorBoard event files."""

from __future__ import annotations

import os
import warnings
from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from torch import nn

from framework.loggers.directory import DirectoryLogger, as_dict, plain


class TensorBoardLogger(DirectoryLogger):
    """Writes event files to ``<save_dir>/<name>/version_<n>`` through ``torch.utils.tensorboard``.

    Each metric is a scalar at the step the Trainer gives; hyperparameters go to TensorBoard's
    HPARAMS tab (with ``hp_metric`` = -1 unless ``default_hp_metric=False``, as in Lightning)
    and to ``hparams.yaml``. ``log_graph=True`` adds the model graph from
    ``example_input_array``. Extra keyword arguments go to ``SummaryWriter``. TensorBoard is
    imported on first write, not with the framework.

    Example::

        trainer = Trainer(logger=TensorBoardLogger("logs", name="digits"))
        # then: tensorboard --logdir logs
    """

    def __init__(self, save_dir: str | os.PathLike, name: str | None = "lightning_logs",
                 version: int | str | None = None, log_graph: bool = False, default_hp_metric: bool = True,
                 prefix: str = "", sub_dir: str | None = None, **writer_kwargs: Any) -> None:
        super().__init__(save_dir, name, version, prefix)
        self._log_graph = log_graph
        self._default_hp_metric = default_hp_metric
        self._sub_dir = sub_dir
        self._writer_kwargs = writer_kwargs
        self._experiment: Any = None

    @property
    def log_dir(self) -> str:
        """This run's folder (with ``sub_dir`` below it when one was given)."""
        directory = super().log_dir
        return os.path.join(directory, self._sub_dir) if self._sub_dir else directory

    @property
    def experiment(self) -> Any:
        """The ``torch.utils.tensorboard.SummaryWriter``, made on first use (``logger.experiment.add_image``)."""
        if self._experiment is None:
            from torch.utils.tensorboard import SummaryWriter

            self._experiment = SummaryWriter(log_dir=self.log_dir, **self._writer_kwargs)
        return self._experiment

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """One scalar per metric at ``step`` (a dict value becomes a group of scalars)."""
        writer = self.experiment
        for key, value in self.with_prefix(metrics).items():
            if isinstance(value, dict):
                writer.add_scalars(key, value, step)
            else:
                writer.add_scalar(key, value.item() if hasattr(value, "item") else value, step)

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None = None,
                        metrics: dict[str, float] | float | None = None, step: int | None = None) -> None:
        """Hyperparameters for ``hparams.yaml`` and, with result ``metrics``, the HPARAMS tab.

        ``metrics`` may be one number (``hp_metric``); with none, ``hp_metric`` = -1 stands in
        unless ``default_hp_metric=False``, in which case the HPARAMS tab gets nothing (as Lightning).
        """
        from torch.utils.tensorboard.summary import hparams

        params = as_dict(params)
        super().log_hyperparams(params)
        if metrics is None:
            metrics = {"hp_metric": -1} if self._default_hp_metric else {}
        elif not isinstance(metrics, Mapping):
            metrics = {"hp_metric": metrics}
        if not metrics:
            return
        self.log_metrics(dict(metrics), step)
        writer = self.experiment._get_file_writer()
        for summary in hparams(_flatten(plain(params)), dict(metrics)):
            writer.add_summary(summary, step)

    def log_graph(self, model: nn.Module, input_array: Any = None) -> None:
        """Add the model's graph, traced on ``input_array`` (else ``model.example_input_array``)."""
        if not self._log_graph:
            return
        example = getattr(model, "example_input_array", None) if input_array is None else input_array
        if example is None:
            warnings.warn("TensorBoardLogger(log_graph=True) needs model.example_input_array (or input_array=...) "
                          "to trace the graph; no graph was logged.", stacklevel=2)
            return
        self.experiment.add_graph(model, example)

    def save(self) -> None:
        """Flush the event file and write ``hparams.yaml``."""
        if self._experiment is not None:
            self._experiment.flush()
        self.write_hparams()

    def finalize(self, status: str) -> None:
        """Flush and close the event file."""
        self.save()
        if self._experiment is not None:
            self._experiment.close()
            self._experiment = None


def _flatten(params: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``{"outer/inner": value}``; lists as their string (TensorBoard takes scalars only)."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict):
            flat.update(_flatten(value, name))
        elif value is None or isinstance(value, list):
            flat[name] = str(value)
        else:
            flat[name] = value
    return flat
