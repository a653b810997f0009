"""``LearningRateMonitor``: log each optimizer's learning rate (and momentum, weight decay) as it changes."""

from collections import defaultdict
from typing import Any

import torch

from framework import console
from framework.callbacks.base import Callback
from framework.errors import MisconfigurationError, describe
from framework.protocols import TrainerLike


class LearningRateMonitor(Callback):
    """Log ``lr-<OptimizerName>`` for every optimizer, at the steps the Trainer logs (or every epoch).

    Names follow Lightning: a scheduler config's ``name`` wins; a second optimizer of the
    same class gets ``-1``; several parameter groups give ``/pg1``, ``/pg2`` (or the groups'
    ``"name"``). The values also go into ``trainer.callback_metrics``. ``fit`` refuses a Trainer
    without a logger.

    :param logging_interval: ``"step"`` (at the steps the Trainer logs), ``"epoch"`` (as each epoch starts), or
        ``None`` (default): each scheduler's own interval, and both for optimizers without a scheduler.
    :param log_momentum: also log ``<name>-momentum`` (``betas[0]`` for Adam-like optimizers; 0 without one).
    :param log_weight_decay: also log ``<name>-weight_decay``, for the groups that have one.
    :raises MisconfigurationError: where ``logging_interval`` is none of "step", "epoch" and ``None``.

    Example::

        Trainer(callbacks=[LearningRateMonitor(logging_interval="step")])
    """

    def __init__(self, logging_interval: str | None = None, log_momentum: bool = False,
                 log_weight_decay: bool = False) -> None:
        if logging_interval not in (None, "step", "epoch"):
            raise MisconfigurationError(
                f"LearningRateMonitor(logging_interval={describe(logging_interval)}): accepted 'step', 'epoch' or None."
            )
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay
        self.lrs: dict[str, list[float]] = defaultdict(list)
        self.last_momentum_values: dict[str, float] = {}
        self.last_weight_decay_values: dict[str, float] = {}

    def on_train_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Check there is a logger to write to, and warn where a momentum asked for does not exist.

        :raises MisconfigurationError: where the Trainer has no logger.
        """
        if not trainer.loggers:
            raise MisconfigurationError(
                "LearningRateMonitor needs a logger to write to, and the Trainer has none (logger=False). "
                "Pass logger=True (or a logger), or remove the LearningRateMonitor."
            )
        groups = [group for optimizer in trainer.optimizers for group in optimizer.param_groups]
        if self.log_momentum and any("momentum" not in group and "betas" not in group for group in groups):
            console.warn_user("You have set log_momentum=True, but some optimizers do not have momentum. This will "
                              "log a value 0 for the momentum.", RuntimeWarning)

    def on_train_batch_start(self, trainer: TrainerLike, pl_module: Any, batch: Any, batch_idx: int) -> None:
        """Log step-interval rates when this batch's step is one the Trainer logs."""
        if self.logging_interval == "epoch":
            return
        step = trainer.state.batches_stepped
        every = trainer.log_every_n_steps
        if (every and (step + 1) % every == 0) or trainer.should_stop:
            self._log(trainer, "step" if self.logging_interval is None else "any", step)

    def on_train_epoch_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Log epoch-interval rates as the epoch starts."""
        if self.logging_interval != "step":
            self._log(trainer, "epoch" if self.logging_interval is None else "any", trainer.state.batches_stepped)

    def _log(self, trainer: TrainerLike, interval: str, step: int) -> None:
        stats = self.extract_stats(trainer, interval)
        if not stats:
            return
        trainer.metrics.remember({name: torch.tensor(value) for name, value in stats.items()})
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(metrics=stats, step=step)

    def extract_stats(self, trainer: TrainerLike, interval: str) -> dict[str, float]:
        """The current values for ``interval`` ("step", "epoch" or "any"), by logged name."""
        stats: dict[str, float] = {}
        class_counts: defaultdict[type, int] = defaultdict(int)
        with_scheduler: list[Any] = []
        for config in trainer.lr_scheduler_configs:
            optimizer = config.scheduler.optimizer
            with_scheduler.append(optimizer)
            name = config.name or self._optimizer_name(optimizer, class_counts)
            if interval in (config.interval, "any"):
                stats.update(self._stats_of(optimizer, name))
        for optimizer in trainer.optimizers:
            optimizer = getattr(optimizer, "optimizer", optimizer)  # a wrapper (ZeroRedundancyOptimizer) holds it
            if any(optimizer is seen for seen in with_scheduler):
                continue
            stats.update(self._stats_of(optimizer, self._optimizer_name(optimizer, class_counts)))
        return stats

    @staticmethod
    def _optimizer_name(optimizer: Any, class_counts: defaultdict[type, int]) -> str:
        class_counts[type(optimizer)] += 1
        count = class_counts[type(optimizer)]
        name = f"lr-{type(optimizer).__name__}"
        return f"{name}-{count - 1}" if count > 1 else name

    def _stats_of(self, optimizer: Any, name: str) -> dict[str, float]:
        groups = optimizer.param_groups
        group_names = [group.get("name", f"pg{i}") for i, group in enumerate(groups, start=1)]
        if len(set(group_names)) != len(group_names):
            raise MisconfigurationError(
                f"LearningRateMonitor: {name}'s parameter groups share a 'name' ({group_names}); give each its own."
            )
        if len(groups) > 1 and f"{name}/pg1" not in self.lrs and name in self.lrs:
            # A group was added (BaseFinetuning): the one logged as `name` so far is now pg1, and keeps its history
            # (moved to the end of the dict, as Lightning moves it).
            self.lrs[f"{name}/pg1"] = self.lrs.pop(name)
        stats: dict[str, float] = {}
        for group, group_name in zip(groups, group_names, strict=True):
            key = f"{name}/{group_name}" if len(groups) > 1 or "name" in group else name
            stats[key] = float(group["lr"])
            self.lrs[key].append(stats[key])
            if self.log_momentum:
                momentum = group["betas"][0] if "betas" in group else group.get("momentum", 0.0)
                stats[f"{key}-momentum"] = self.last_momentum_values[f"{key}-momentum"] = float(momentum)
            if self.log_weight_decay and "weight_decay" in group:
                value = float(group["weight_decay"])
                stats[f"{key}-weight_decay"] = self.last_weight_decay_values[f"{key}-weight_decay"] = value
        return stats
