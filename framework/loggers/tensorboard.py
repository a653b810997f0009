"""``TensorBoardLogger``: scalars, hyperparameters and the model graph as TensorBoard event files."""

import contextlib
import json
import os
import warnings
from argparse import Namespace
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from framework.hparams import yaml_form
from framework.loggers.base import rank_zero_experiment
from framework.loggers.directory import DirectoryLogger, as_dict
from framework.nested import map_tensors
from framework.utilities.rank_zero import rank_zero_only


class TensorBoardLogger(DirectoryLogger):
    """Writes event files to ``<save_dir>/<name>/version_<n>`` through ``torch.utils.tensorboard``.

    Each metric is a scalar at the step the Trainer gives; hyperparameters go to TensorBoard's
    HPARAMS tab (with ``hp_metric`` = -1 unless ``default_hp_metric=False``, as in Lightning)
    and to ``hparams.yaml``. ``log_graph=True`` adds the model graph from
    ``example_input_array``. TensorBoard is imported on first write, not with the framework.

    :param save_dir: the directory the experiments go under, local (``~`` and ``$VARIABLES`` are expanded) or an
        fsspec URL.
    :param name: the experiment's folder under ``save_dir`` (default ``"lightning_logs"``); ``None`` or ``""``:
        the versions go straight into ``save_dir``.
    :param version: an int (the folder ``version_<n>``) or a string (the folder's name); ``None`` (default): one
        past the highest ``version_<n>`` there, decided on first use.
    :param log_graph: True lets ``log_graph`` add the model's graph (default False: it does nothing).
    :param default_hp_metric: True (default) logs ``hp_metric`` = -1 when hyperparameters come without metrics.
    :param prefix: put before each metric's name, joined with ``-`` (default ``""``: none).
    :param sub_dir: a folder under the version's folder for the event files; ``None`` (default): none.
    :param writer_kwargs: other keyword arguments, for ``torch.utils.tensorboard.SummaryWriter``.

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
        self._next_step = 0  # the step after the last one logged

    @property
    def root_dir(self) -> str:
        """``<save_dir>/<name>``, with ``~`` and ``$VARIABLES`` expanded (versions are counted there)."""
        return os.path.expanduser(os.path.expandvars(super().root_dir))

    @property
    def log_dir(self) -> str:
        """This run's folder, ``<save_dir>/<name>/<version>`` (with ``sub_dir`` below it when one was given),
        from the ``save_dir``, ``name`` and ``version`` properties, with ``~`` and ``$VARIABLES`` expanded."""
        directory = super().log_dir
        if self._sub_dir:
            directory = os.path.join(directory, self._sub_dir)
        return os.path.expanduser(os.path.expandvars(directory))

    @property
    def sub_dir(self) -> str | None:
        """The folder under the run's version folder the event files go to, or None."""
        return self._sub_dir

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """The ``torch.utils.tensorboard.SummaryWriter``, made on first use (``logger.experiment.add_image``); a
        ``NoOpExperiment`` on global ranks other than 0."""
        if self._experiment is None:
            from torch.utils.tensorboard import SummaryWriter

            self._experiment = SummaryWriter(log_dir=self.log_dir, **self._writer_kwargs)
        return self._experiment

    def __getstate__(self) -> dict[str, Any]:
        """A copy (pickled into another process, or a pickled Trainer) makes a writer of its own when it writes:
        a writer holds a thread and an open file."""
        return {**self.__dict__, "_experiment": None}

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """One scalar per metric at ``step`` (a dict value becomes a group of scalars); nothing on global ranks
        other than 0."""
        writer = self.experiment
        if step is not None:
            self._next_step = max(self._next_step, step + 1)
        for key, value in self.with_prefix(metrics).items():
            if isinstance(value, dict):
                writer.add_scalars(key, value, step)
            else:
                writer.add_scalar(key, value.item() if hasattr(value, "item") else value, step)

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None = None,
                        metrics: dict[str, float] | float | None = None, step: int | None = None) -> None:
        """Hyperparameters for ``hparams.yaml`` and, with result ``metrics``, the HPARAMS tab.

        Nothing is written on global ranks other than 0.

        :param params: a dict (nested dicts are flattened for the tab) or an ``argparse.Namespace``.
        :param metrics: ``{name: value}``, or one number (``hp_metric``); ``None`` (default): ``hp_metric`` = -1
            stands in, unless ``default_hp_metric=False``, in which case the HPARAMS tab gets nothing (as Lightning).
        :param step: the step the metrics are logged at (default ``None``).
        """
        params = as_dict(params)  # checked on every rank, so a mistake fails everywhere alike
        if rank_zero_only.rank != 0:  # type: ignore[attr-defined]
            return
        from torch.utils.tensorboard.summary import hparams

        super().log_hyperparams(params)
        if metrics is None:
            metrics = {"hp_metric": -1} if self._default_hp_metric else {}
        elif not isinstance(metrics, Mapping):
            metrics = {"hp_metric": metrics}
        if not metrics:
            return
        self.log_metrics(dict(metrics), step)
        writer = self.experiment._get_file_writer()
        for summary in hparams(_flatten(yaml_form(params)), dict(metrics)):
            writer.add_summary(summary, step)

    @rank_zero_only
    def log_graph(self, model: nn.Module, input_array: Any = None) -> None:
        """With ``log_graph=True``, add the model's graph, traced on ``input_array`` (else
        ``model.example_input_array``): a tensor, or a tuple of ``forward``'s positional arguments. The input
        goes through the Module's batch-transfer hooks to the model's device first; the model needs no Trainer.
        Warns, logging nothing, when there is no input or it cannot be traced (a dict)."""
        if not self._log_graph:
            return
        example = getattr(model, "example_input_array", None) if input_array is None else input_array
        if example is None:
            warnings.warn("Could not log computational graph to TensorBoard: The `model.example_input_array` is "
                          "None and an `input_array` was not given either; set one to have the graph traced.",
                          UserWarning, stacklevel=3)
        elif not isinstance(example, (torch.Tensor, tuple)):
            warnings.warn(f"Could not log computational graph to TensorBoard: the input (`input_array` or "
                          f"`model.example_input_array`) has type {type(example)}, which can't be traced by "
                          "TensorBoard. Give a tensor, or a tuple of the positional arguments of forward().",
                          UserWarning, stacklevel=3)
        else:
            with _traced(model):
                self.experiment.add_graph(model, _on_model_device(model, example))

    @rank_zero_only
    def log_restart(self, record: dict[str, Any]) -> None:
        """``restarts.jsonl`` (as every folder logger), and the record as text under ``restarts`` at its step."""
        super().log_restart(record)
        self.experiment.add_text("restarts", json.dumps(record), record["global_step"])

    def checkpoint_position(self) -> dict[str, Any]:
        """The folder and the step after the last one logged, once the event file is flushed."""
        if rank_zero_only.rank != 0 or self._experiment is None:  # type: ignore[attr-defined]
            return {}
        self.save()
        return {"log_dir": self.log_dir, "step": self._next_step}

    def resume_at(self, position: dict[str, Any], epoch_end_row: dict[str, Any] | None = None) -> None:
        """Resuming in the folder an interrupted run wrote: a new event file whose ``purge_step`` makes
        TensorBoard drop that run's events from the step after the checkpoint's last one on, which this run logs
        again. ``epoch_end_row`` is not written: its step is the checkpoint's last, whose events are kept (the
        interrupted run wrote it there unless it died between the save and the epoch's end)."""
        if rank_zero_only.rank != 0 or position.get("log_dir") != self.log_dir:  # type: ignore[attr-defined]
            return
        from torch.utils.tensorboard import SummaryWriter

        if self._experiment is not None:
            self._experiment.close()
        self._experiment = SummaryWriter(log_dir=self.log_dir, purge_step=position["step"], **self._writer_kwargs)
        self._next_step = position["step"]

    @rank_zero_only
    def save(self) -> None:
        """Flush the event file and write ``hparams.yaml``."""
        if self._experiment is not None:
            self._experiment.flush()
        self.write_hparams()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Flush and close the event file."""
        self.save()
        if self._experiment is not None:
            self._experiment.close()
            self._experiment = None


def _on_model_device(model: nn.Module, example: Any) -> Any:
    """``example`` as a batch reaches the model: through a Module's transfer hooks, onto its device."""
    device = next((tensor.device for tensor in (*model.parameters(), *model.buffers())), torch.device("cpu"))
    transfer = getattr(model, "transfer_batch_to_device", None)
    if transfer is None:  # a plain torch module
        return map_tensors(example, lambda tensor: tensor.to(device))
    example = model.on_before_batch_transfer(example, 0)
    return model.on_after_batch_transfer(transfer(example, device, 0), 0)


@contextlib.contextmanager
def _traced(model: nn.Module) -> Iterator[None]:
    """While tracing, a Module's ``trainer`` answers None instead of raising (tracing reads every attribute)."""
    scripting = getattr(model, "_jit_is_scripting", None)
    if scripting is None:
        yield
        return
    model._jit_is_scripting = True
    try:
        yield
    finally:
        model._jit_is_scripting = scripting


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
