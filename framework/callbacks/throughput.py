"""``ThroughputMonitor``: training batches, samples and items per second, logged with the other metrics."""

import time
from collections.abc import Callable
from typing import Any

import torch

from framework.callbacks.base import Callback
from framework.nested import extract_batch_size
from framework.protocols import TrainerLike


class ThroughputMonitor(Callback):
    """Log ``train/batches_per_sec``, ``train/samples_per_sec`` (and ``train/items_per_sec``) every
    ``log_every_n_steps`` optimizer steps, with the running totals ``train/batches``,
    ``train/samples``, ``train/items`` and ``train/time``.

    Rates are measured over the steps since the previous log, so the clock is read (and a
    GPU synchronised) only at those steps, not on every batch. Nothing is logged without a logger.

    :param batch_size_fn: ``batch -> int``, the samples in a batch; ``None`` (default): the first dimension of
        the first tensor found in it (1 when it has none).
    :param length_fn: ``batch -> int``, the items (tokens...) in a batch, logged as ``train/items...``;
        ``None`` (default): no items are counted.

    Example::

        ThroughputMonitor(length_fn=lambda batch: batch["input_ids"].numel())
    """

    def __init__(self, batch_size_fn: Callable[[Any], int] | None = None,
                 length_fn: Callable[[Any], int] | None = None) -> None:
        self.batch_size_fn = batch_size_fn or extract_batch_size
        self.length_fn = length_fn
        self._totals = {"batches": 0, "samples": 0, "items": 0}
        self._at_last_log = dict(self._totals)
        self._started = 0.0
        self._last_log_time = 0.0
        self._logged_at = -1  # batches_stepped when it last logged (accumulation repeats a step count)

    def on_train_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Start counting."""
        self._totals = {"batches": 0, "samples": 0, "items": 0}
        self._at_last_log = dict(self._totals)
        self._logged_at = -1
        self._started = self._last_log_time = self._now(trainer)

    def on_train_batch_end(self, trainer: TrainerLike, pl_module: Any,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        """Count the batch; at a logged step, log the rates since the last one."""
        totals = self._totals
        totals["batches"] += 1
        totals["samples"] += int(self.batch_size_fn(batch))
        if self.length_fn is not None:
            totals["items"] += int(self.length_fn(batch))
        every = trainer.log_every_n_steps
        stepped = trainer.state.batches_stepped
        if not trainer.loggers or not every or stepped % every or stepped == self._logged_at:
            return
        self._logged_at = stepped
        now = self._now(trainer)
        window = max(now - self._last_log_time, 1e-12)
        metrics = {"train/time": now - self._started}
        for kind in ("batches", "samples", "items"):
            if kind == "items" and self.length_fn is None:
                continue
            metrics[f"train/{kind}_per_sec"] = (totals[kind] - self._at_last_log[kind]) / window
            metrics[f"train/{kind}"] = float(totals[kind])
        self._at_last_log, self._last_log_time = dict(totals), now
        trainer.metrics.remember({name: torch.tensor(value) for name, value in metrics.items()})
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(metrics=metrics, step=stepped - 1)

    @staticmethod
    def _now(trainer: TrainerLike) -> float:
        if trainer.runtime.device.type == "cuda":
            torch.cuda.synchronize(trainer.runtime.device)
        return time.perf_counter()
