"""What users read from a ``Trainer``: counters, metrics, ranks, loaders and callbacks, under Lightning's names.

Every property here is a view: of the settings, of the current (or last) ``Run`` and of what its runs share (the
``state``, ``metrics``, ``runtime`` and ``run_context``); only ``estimated_stepping_batches`` does work, asking
for the training loader when it is read before training starts. The few that Lightning lets users set
(``should_stop``, ``optimizers``, ``lr_scheduler_configs``, ``ckpt_path``, ``callbacks``, ``model``) write to
that state.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from framework.callbacks import EarlyStopping, ProgressBar, Timer
from framework.callbacks.base import Callback
from framework.io.checkpoint_io import CheckpointIO
from framework.loggers.base import Logger
from framework.loggers.directory import log_dir_of
from framework.module import Module
from framework.precision import Precision
from framework.strategies import Strategy
from framework.trainer.data import INFINITE, load_train_data
from framework.trainer.settings import SETTING_NAMES, Settings, SettingView
from framework.trainer.state import RunningStage, TrainerFn, TrainerStatus

if TYPE_CHECKING:
    import torch
    from torch.optim import Optimizer

    from framework.trainer.fit_loop import FitLoop
    from framework.trainer.hook_runner import HookRunner
    from framework.trainer.prediction_state import PredictionState
    from framework.trainer.run import Run
    from framework.utilities.types import LRSchedulerConfig

class TrainerProperties:
    """The views a ``Trainer`` offers (the Trainer subclasses this)."""

    _current_run: Run | None
    _settings: Settings
    _callbacks: list[Callback]

    @property
    def settings(self) -> Settings:
        """The checked value arguments, frozen (the last run's, which may have settled ``max_epochs``); each is
        also an attribute (``trainer.max_epochs``). :meta private:"""
        run = self._current_run
        return self._settings if run is None else run.settings

    def replace_settings(self, **changes: Any) -> None:
        """Set settings fields (``trainer.max_epochs = 3`` calls this): a new ``Settings`` with ``changes``, which
        a run under way reads from its next use of them. The values are not checked, as with Lightning's
        attributes. :meta private:"""
        self._settings = dataclasses.replace(self.settings, **changes)
        if self._current_run is not None:
            self._current_run.settings = self._settings

    @property
    def callbacks(self) -> list[Callback]:
        """The callbacks of the current or last run (with those the Module's ``configure_callbacks`` added), else
        the Trainer's own with the ones its flags add."""
        run = self._current_run
        return self._callbacks if run is None else run.callbacks

    @callbacks.setter
    def callbacks(self, callbacks: list[Callback]) -> None:
        self._callbacks = list(callbacks)
        if self._current_run is not None:
            self._current_run.callbacks = self._callbacks

    @property
    def model(self) -> torch.nn.Module | None:
        """The Module as the strategy set it up (wrapped by DDP, sharded by FSDP ...); None before a run."""
        return self.run_context.model

    @model.setter
    def model(self, model: torch.nn.Module | None) -> None:
        self.run_context.model = model

    @property
    def hooks(self) -> HookRunner | None:
        """The hook runner of the current or last run (None before its set-up).

        :meta private:
        """
        return None if self._current_run is None else self._current_run.hooks

    @property
    def fit_loop(self) -> FitLoop | None:
        """The loop of the current or last ``fit`` (None before one), under Lightning's name.

        :meta private:
        """
        return None if self._current_run is None else self._current_run.fit_loop

    @fit_loop.setter
    def fit_loop(self, loop: FitLoop | None) -> None:
        if self._current_run is not None:
            self._current_run.fit_loop = loop

    @property
    def current_epoch(self) -> int:
        """Training epochs finished so far, i.e. the index of the epoch running."""
        return self.state.current_epoch

    @property
    def global_step(self) -> int:
        """Optimizer steps taken so far (every ``optimizer.step()`` in manual optimization)."""
        return self.state.global_step

    @property
    def should_stop(self) -> bool:
        """Set to True to end ``fit`` after the current batch, once ``min_epochs`` and ``min_steps`` are met."""
        return self.state.should_stop

    @should_stop.setter
    def should_stop(self, value: bool) -> None:
        """Ask ``fit`` to stop (or withdraw the request); each run starts with False."""
        self.state.should_stop = bool(value)

    @property
    def callback_metrics(self) -> dict[str, Any]:
        """The latest value of every logged name, the running batch's included (what callbacks monitor)."""
        return self.metrics.callback_view()

    @property
    def logged_metrics(self) -> dict[str, Any]:
        """The latest values sent to loggers, the running batch's included."""
        return self.metrics.logged_view()

    @property
    def progress_bar_metrics(self) -> dict[str, Any]:
        """The latest values logged with ``prog_bar=True``, as floats."""
        return self.metrics.progress_bar_view()

    @property
    def strategy(self) -> Strategy:
        """The ``Strategy`` in use (``trainer.runtime.strategy``)."""
        return self.runtime.strategy

    @property
    def checkpoint_io(self) -> CheckpointIO:
        """The ``CheckpointIO`` every checkpoint save, load and removal goes through (``plugins=``; default
        ``TorchCheckpointIO``)."""
        return self.runtime.strategy.checkpoint_io

    @property
    def precision(self) -> str:
        """The precision mode's name, such as ``"32-true"``."""
        return self.runtime.precision.name

    @property
    def precision_plugin(self) -> Precision:
        """The ``Precision`` object in use (``trainer.runtime.precision``), under Lightning's name."""
        return self.runtime.precision

    @property
    def lightning_module(self) -> Module | None:
        """The ``Module`` being run, under Lightning's name (``trainer.module``)."""
        return self.module

    @property
    def world_size(self) -> int:
        """Number of processes taking part, over all nodes."""
        return self.runtime.world_size

    @property
    def global_rank(self) -> int:
        """This process's index among all processes."""
        return self.runtime.global_rank

    @property
    def local_rank(self) -> int:
        """This process's index on its node."""
        return self.runtime.local_rank

    @property
    def node_rank(self) -> int:
        """This node's index."""
        return self.runtime.node_rank

    @property
    def is_global_zero(self) -> bool:
        """Whether this process is global rank 0."""
        return self.runtime.is_global_zero

    @property
    def num_nodes(self) -> int:
        """The ``num_nodes`` the Trainer was given."""
        return self.runtime.num_nodes

    @property
    def device_ids(self) -> list[int]:
        """Indices of the devices in use (``[0]`` for one device)."""
        return self.runtime.device_ids

    @property
    def num_devices(self) -> int:
        """How many devices in use per node (``len(device_ids)``)."""
        return len(self.runtime.device_ids)

    @property
    def logger(self) -> Logger | None:
        """The first logger, or None."""
        return self.loggers[0] if self.loggers else None

    @property
    def log_dir(self) -> str | None:
        """Lightning's rule: the first logger's run directory for CSV and TensorBoard loggers, the ``save_dir`` of
        any other (None where it has none); ``default_root_dir`` without a logger."""
        return log_dir_of(self.loggers, self.default_root_dir)

    @property
    def sanity_checking(self) -> bool:
        """The sanity-check validation at the start of ``fit`` is running."""
        return self.state.sanity_checking

    @property
    def training(self) -> bool:
        """The training loop is running (not validation inside fit)."""
        return self.state.stage == RunningStage.TRAINING

    @property
    def validating(self) -> bool:
        """A validation loop is running (from ``validate`` or inside ``fit``; not the sanity check)."""
        return self.state.stage == RunningStage.VALIDATING

    @property
    def testing(self) -> bool:
        """The test loop is running."""
        return self.state.stage == RunningStage.TESTING

    @property
    def predicting(self) -> bool:
        """The predict loop is running."""
        return self.state.stage == RunningStage.PREDICTING

    @property
    def checkpoint_callbacks(self) -> list[Callback]:
        """The checkpoint-saving callbacks (``Checkpoint`` subclasses, and any other with ``runs_last``)."""
        return [cb for cb in self.callbacks if cb.runs_last]

    @property
    def checkpoint_callback(self) -> Callback | None:
        """The first checkpoint-saving callback, or None."""
        found = self.checkpoint_callbacks
        return found[0] if found else None

    @property
    def early_stopping_callbacks(self) -> list[EarlyStopping]:
        """The EarlyStopping callbacks."""
        return [cb for cb in self.callbacks if isinstance(cb, EarlyStopping)]

    @property
    def early_stopping_callback(self) -> EarlyStopping | None:
        """The first EarlyStopping callback, or None."""
        found = self.early_stopping_callbacks
        return found[0] if found else None

    @property
    def progress_bar_callback(self) -> ProgressBar | None:
        """The progress bar callback, or None."""
        return next((cb for cb in self.callbacks if isinstance(cb, ProgressBar)), None)

    @property
    def epoch_limit(self) -> int:
        """``max_epochs`` as training applies it (-1: no limit). ``max_epochs=None`` means 1000 epochs, or no
        limit where ``max_steps``, ``max_time`` or a ``Timer`` bounds the run (Lightning's rule)."""
        return self.settings.epoch_limit(any(isinstance(c, Timer) for c in self.callbacks))

    @property
    def estimated_stepping_batches(self) -> float:
        """How many optimizer steps ``fit`` will take, from max_steps, max_epochs and the batch counts.

        Read in ``configure_optimizers`` (e.g. for OneCycleLR), it asks for the training loader
        early; otherwise that happens when training starts.
        """
        epochs = self.epoch_limit
        if epochs == -1:  # no epoch limit: the loader's length does not matter
            return INFINITE if self.max_steps == -1 else self.max_steps
        if self.run_context.train_loader is None and self.state.fn == TrainerFn.FITTING and self._current_run:
            load_train_data(self._current_run)
        by_epochs = INFINITE
        if self.num_training_batches != INFINITE:
            by_epochs = math.ceil(self.num_training_batches / self.accumulate_grad_batches) * epochs
        return by_epochs if self.max_steps == -1 else min(self.max_steps, by_epochs)

    @property
    def interrupted(self) -> bool:
        """The last run was interrupted (Ctrl-C) or failed."""
        return self.state.status == TrainerStatus.INTERRUPTED

    @property
    def is_last_batch(self) -> bool:
        """The training batch running is the last of its epoch (e.g. to step a scheduler by hand)."""
        return self.state.is_last_batch

    @property
    def optimizers(self) -> list[Optimizer]:
        """The Module's optimizers, set up for this run's strategy and precision."""
        return self.run_context.optimizers

    @optimizers.setter
    def optimizers(self, optimizers: list[Optimizer]) -> None:
        self.run_context.optimizers = list(optimizers)

    @property
    def lr_scheduler_configs(self) -> list[LRSchedulerConfig]:
        """The learning-rate schedulers and when each steps (``StochasticWeightAveraging`` replaces them)."""
        return self.run_context.lr_scheduler_configs

    @lr_scheduler_configs.setter
    def lr_scheduler_configs(self, configs: list[LRSchedulerConfig]) -> None:
        self.run_context.lr_scheduler_configs = list(configs)
        self.run_context.has_step_schedulers = any(config.interval == "step" for config in configs)

    @property
    def num_training_batches(self) -> float:
        """Training batches per epoch (inf where the loader has no length)."""
        return self.run_context.num_training_batches

    @property
    def val_check_batch(self) -> float:
        """Validation runs after every this many training batches (inf: at each epoch's end)."""
        return self.run_context.val_check_batch

    @property
    def ckpt_path(self) -> str | None:
        """The checkpoint the current or last run loaded (resolved from "last", "best" ...), None if none."""
        return self.run_context.ckpt_path

    @ckpt_path.setter
    def ckpt_path(self, path: str | None) -> None:
        self.run_context.ckpt_path = path

    @property
    def predict_loop(self) -> PredictionState:
        """The last ``predict``'s predictions and batch indices (``BasePredictionWriter`` reads them)."""
        return self.run_context.predict_loop

    @property
    def train_dataloader(self) -> Iterable | None:
        """The training loader of the current or last ``fit`` (None before training starts)."""
        return self.run_context.train_loader

    @property
    def val_dataloaders(self) -> Any:
        """The validation loader(s) in use: one loader, a list when there are several, or None."""
        context = self.run_context
        return _one_or_list(context.val_loaders if self.state.fn == TrainerFn.FITTING else context.eval_loaders["val"])

    @property
    def test_dataloaders(self) -> Any:
        """The test loader(s) of the current or last ``test``: one loader, a list, or None."""
        return _one_or_list(self.run_context.eval_loaders["test"])

    @property
    def predict_dataloaders(self) -> Any:
        """The predict loader(s) of the current or last ``predict``: one loader, a list, or None."""
        return _one_or_list(self.run_context.eval_loaders["predict"])

    @property
    def num_val_batches(self) -> list[float]:
        """Batches per validation loader: fit's inside fit, else those of the current or last ``validate``."""
        context = self.run_context
        return list(context.val_batch_counts if self.state.fn == TrainerFn.FITTING else context.eval_batches["val"])

    @property
    def num_sanity_val_batches(self) -> list[float]:
        """Validation batches per loader that the sanity check runs."""
        return [min(self.settings.sanity_steps, n) for n in self.run_context.val_batch_counts]

    @property
    def num_test_batches(self) -> list[float]:
        """Batches per test loader in the current or last ``test``."""
        return list(self.run_context.eval_batches["test"])

    @property
    def num_predict_batches(self) -> list[float]:
        """Batches per predict loader in the current or last ``predict``."""
        return list(self.run_context.eval_batches["predict"])

    @property
    def enable_validation(self) -> bool:
        """``fit`` validates: the Module has a ``validation_step``, there is validation data and the limit is not 0."""
        return self.run_context.validates_in_fit


for _name in SETTING_NAMES:  # each setting is an attribute under its argument's name, as in Lightning
    setattr(TrainerProperties, _name, SettingView())
    TrainerProperties.__dict__[_name].__set_name__(TrainerProperties, _name)


def _one_or_list(loaders: list[Any]) -> Any:
    if not loaders:
        return None
    return loaders[0] if len(loaders) == 1 else list(loaders)
