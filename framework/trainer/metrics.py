"""``trainer.callback_metrics``, ``logged_metrics`` and ``progress_bar_metrics``, and the hand-off to loggers.

Names logged with both ``on_step`` and ``on_epoch`` appear as ``name_step`` and
``name_epoch`` to loggers and the progress bar, and under all three names in
``callback_metrics``, as in Lightning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from framework.errors import MisconfigurationError
from framework.trainer.results import Results
from framework.trainer.sync_agreement import agreed_entries

Views = tuple[dict[str, Any], dict[str, Any], dict[str, Any]]


def step_views(results: Results) -> Views:
    """(for loggers, for the progress bar, for callbacks) from the values logged in the current batch.

    Step values of validation and test reach loggers and the progress bar but not
    ``callback_metrics``, as in Lightning: callbacks monitor their epoch values.
    """
    views: Views = ({}, {}, {})
    for entry in results.step_values():
        shown = f"{entry.name}_step{entry.suffix}" if entry.on_epoch else entry.key
        _place(views, entry, shown, as_tensor(entry.step_value), for_callbacks=results.training)
    return views


def epoch_views(results: Results, sync: Callable[[torch.Tensor, str], torch.Tensor],
                gather: Callable[[Any], list[Any]] | None = None, module: Any = None) -> Views:
    """The same three dicts from the epoch's reduced values (``gather``: several ranks agree on what to sync,
    standing in for a Metric of ``module`` that this rank did not log)."""
    views: Views = ({}, {}, {})
    for entry in results.entries() if gather is None else agreed_entries(results, gather, module):
        if not entry.on_epoch:
            continue
        value = entry.epoch_value(sync)
        if value is not None:
            shown = f"{entry.name}_epoch{entry.suffix}" if entry.on_step else entry.key
            _place(views, entry, shown, value, for_callbacks=True)
    return views


def _place(views: Views, entry: Any, shown: str, value: torch.Tensor, for_callbacks: bool) -> None:
    """Put ``value`` in the views: for callbacks under its key and the name shown, for loggers and the progress bar
    under the name shown, where the entry goes to them."""
    log, bar, callback = views
    if for_callbacks:
        callback[entry.key] = value
        callback[shown] = value
    if entry.logger:
        log[shown] = value
    if entry.prog_bar:
        bar[shown] = value


class MetricStore:
    """The latest value of every metric, across stages, as tensors; floats only for loggers.

    ``live`` is the training loop's Results while an epoch runs (its step values show in
    ``callback_metrics`` at once), and ``ending`` the Results whose epoch-end hooks are
    running (their epoch values show too, so a callback's ``on_train_epoch_end`` sees them).
    """

    def __init__(self, loggers: list[Any], sync: Callable[[torch.Tensor, str], torch.Tensor],
                 gather: Callable[[Any], list[Any]] | None = None) -> None:
        self.loggers = loggers
        self.sync = sync
        self.gather = gather
        self.module: Any = None  # the Module that logs, whose Metrics a rank that logged none may have to sync
        self.callback: dict[str, Any] = {}
        self.logged: dict[str, Any] = {}
        self.progress_bar: dict[str, Any] = {}
        self.live: Results | None = None
        self.ending: Results | None = None
        self._ending_views: Views | None = None
        # Step-level logs of validation/test batches are numbered per dataloader.
        self.eval_steps: dict[int, int] = {}

    def callback_view(self) -> dict[str, Any]:
        """``callback_metrics``: what was stored, with the running values on top. Written to, it stores what is
        written, as Lightning's dict does (tests of callbacks set a monitored value this way)."""
        return _StoredOnWrite({**self.callback, **self._running(2)}, self.callback)

    def logged_view(self) -> dict[str, Any]:
        """``logged_metrics``: what went to loggers, with the running values on top."""
        return {**self.logged, **self._running(0)}

    def progress_bar_view(self) -> dict[str, float]:
        """``progress_bar_metrics``: what went to the progress bar, with the running values on top, as floats."""
        return to_floats({**self.progress_bar, **self._running(1)})

    def _running(self, part: int) -> dict[str, Any]:
        """Part ``part`` of the views of the running batch and of the epoch whose end hooks run."""
        view: dict[str, Any] = {}
        if self.live is not None:
            view.update(step_views(self.live)[part])
        if self.ending is not None:
            view.update(self._ending_now()[part])
        return view

    def _ending_now(self) -> Views:
        # Reading must never run a collective (one rank alone may read): with several ranks the views synced on
        # every rank by refresh_ending; on one process, computed here.
        return self._ending_views if self._ending_views is not None else epoch_views(self.ending, _this_rank_only)

    def end_epoch_of(self, results: Results | None) -> None:
        """``results`` is the one whose epoch-end hooks run now (None: they are over)."""
        self.ending = results
        self._ending_views = None

    def ending_row(self) -> dict[str, float]:
        """The loggers' part of the epoch whose end hooks run, as floats: the row ``log_epoch`` writes once they
        are over (a checkpoint saved in them carries it: ``checkpoint_contents``)."""
        return to_floats(self._ending_now()[0]) if self.ending is not None else {}

    def refresh_ending(self) -> None:
        """With several ranks: sync the ending epoch's values now, on every rank, for callbacks to read."""
        if self.gather is not None and self.ending is not None:
            self._ending_views = epoch_views(self.ending, self.sync, self.gather, self.module)

    def store(self, views: Views) -> dict[str, Any]:
        """Keep ``views`` as the latest values; returns the part meant for loggers."""
        log, bar, callback = views
        self.callback.update(callback)
        self.progress_bar.update(bar)
        return log

    def remember(self, values: dict[str, Any]) -> None:
        """Add ``values`` to ``callback_metrics`` (callbacks that log on their own, such as LearningRateMonitor)."""
        self.callback.update(values)

    def log_step(self, results: Results, step: int, epoch: int | None, to_loggers: bool = True) -> None:
        """Store the current batch's step values and hand them to the loggers (every ``log_every_n_steps``)."""
        self.send(self.store(step_views(results)), step, epoch, to_loggers)

    def log_epoch(self, results: Results, step: int, epoch: int | None) -> dict[str, Any]:
        """Store the epoch values of ``results`` and hand them to the loggers; returns the logger part."""
        log = self.store(epoch_views(results, self.sync, self.gather, self.module))
        self.send(log, step, epoch)
        return log

    def keep_epoch(self, results: Results) -> None:
        """Store the epoch values of ``results`` in every metric dict without sending them to loggers."""
        self.logged.update(self.store(epoch_views(results, self.sync, self.gather, self.module)))

    def send(self, metrics: dict[str, Any], step: int, epoch: int | None, to_loggers: bool = True) -> None:
        """Loggers get floats, with the epoch under "epoch" (None: step values of evaluation, as Lightning)."""
        self.logged.update(metrics)
        if not to_loggers or not self.loggers or not metrics:
            return
        floats = to_floats(metrics)
        if epoch is not None:
            floats["epoch"] = epoch
        for logger in self.loggers:
            logger.log_metrics(metrics=floats, step=step)
            logger.save()  # as Lightning: what was logged is on disk (CSV rows, TensorBoard events)

    def clear(self) -> None:
        """Forget every value: each run (and training after the sanity check) starts empty."""
        self.callback.clear()
        self.logged.clear()
        self.progress_bar.clear()
        self.live = None
        self.end_epoch_of(None)
        self.eval_steps.clear()


def log_hyperparams(loggers: list[Any], module: Any, datamodule: Any) -> None:
    """The initial hyperparameters of the Module and the DataModule that asked to log them, to every logger."""
    sources = [obj for obj in (module, datamodule) if obj is not None and getattr(obj, "_log_hyperparams", False)]
    if not sources:
        return
    hparams: dict[str, Any] = {}
    for source in sources:
        initial = source.hparams_initial
        clashes = [k for k, v in initial.items() if k in hparams and hparams[k] != v]
        if clashes:
            raise MisconfigurationError(
                f"The Module and the DataModule both save hyperparameters {clashes} with different values; "
                "rename one of them so the logged hyperparameters are unambiguous."
            )
        hparams.update(initial)
    for logger in loggers:
        logger.log_hyperparams(hparams)


def as_tensor(value: Any) -> torch.Tensor:
    """A logged Python number as a tensor, as Lightning stores it (converted here, not on every ``self.log``)."""
    return value if isinstance(value, torch.Tensor) else torch.tensor(float(value), dtype=torch.get_default_dtype())


def _this_rank_only(tensor: torch.Tensor, reduce_op: str) -> torch.Tensor:
    return tensor


def to_floats(metrics: dict[str, Any]) -> dict[str, float]:
    """Loggers get Python floats; this is where tensors are read back: once per flush and device, however
    many values there are (each read waits for the device)."""
    floats = {key: float(value) for key, value in metrics.items() if not isinstance(value, torch.Tensor)}
    by_device: dict[torch.device, list[str]] = {}
    for key, value in metrics.items():
        if isinstance(value, torch.Tensor):
            by_device.setdefault(value.device, []).append(key)
    for device, keys in by_device.items():
        dtype = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
        values = torch.stack([metrics[key].detach().reshape(()).to(dtype) for key in keys]).tolist()
        floats.update(zip(keys, values, strict=True))
    return {key: floats[key] for key in metrics}  # in the order logged


class _StoredOnWrite(dict):
    """A view whose writes also reach the store it was made from."""

    def __init__(self, values: dict[str, Any], store: dict[str, Any]) -> None:
        super().__init__(values)
        self._store = store

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self._store[key] = value

    def update(self, *args: Any, **kwargs: Any) -> None:
        """``dict.update``, stored too."""
        for key, value in dict(*args, **kwargs).items():
            self[key] = value
