"""``Run``: one call of ``fit``, ``validate``, ``test`` or ``predict``, and everything its loops work with.

The Trainer builds one per call and hands it to the loops and their helpers, which read what they need from it and
from nothing else: the settings, the Runtime, the state and counters, the metric store, the hook runner, the
profiler, the Module and its data, and the callables a batch goes through (``move_batch``, ``training_step``,
``step_function``). What outlives one call (the optimizers, the loaders, the set-up model, the checkpoint loaded) is
in ``context``, the Trainer's ``RunContext``, which every Run of a Trainer shares; so are the state, the metric
store and the training results, which the Trainer shows under Lightning's names between runs.

A batch's route::

    Trainer.fit -> Run -> lifecycle.run_here -> FitLoop -> run.move_batch -> AutomaticOptimization
        -> StepClosure -> run.training_step (Strategy.step_function: the model's forward under the Precision)
        -> StepHooks: backward (Precision/Strategy) -> optimizer step (Precision/Strategy)

and a ``ckpt_path``'s::

    Trainer.fit(ckpt_path=) -> Run -> FitLoop.fit -> checkpoint_paths.load_for (resolve "last"/"best"/"hpc")
        -> Strategy.load_checkpoint -> framework.io (safe loading) -> checkpoint_contents.restore_*
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from framework.callbacks.timer import Timer
from framework.profilers.base import PassThroughProfiler
from framework.trainer.hook_runner import HookRunner
from framework.trainer.settings import Settings
from framework.trainer.state import TrainerFn

if TYPE_CHECKING:
    import torch

    from framework.callbacks.base import Callback
    from framework.datamodule import DataModule
    from framework.loggers.base import Logger
    from framework.module import Module
    from framework.profilers.base import Profiler
    from framework.protocols import TrainerLike
    from framework.runtime import Runtime
    from framework.trainer.metrics import MetricStore
    from framework.trainer.results import Results
    from framework.trainer.run_context import RunContext
    from framework.trainer.state import TrainerState


class FitProgress(Protocol):
    """What a checkpoint saved during fit reads from the fit loop (``framework.trainer.fit_loop.FitLoop``)."""

    #: The batch being finished ended with an optimizer step.
    batch_stepped: bool

    def training_rng_states(self) -> dict[str, Any]:
        """The random state training goes on from."""


@dataclasses.dataclass(eq=False)
class Run:
    """What one entry-point call runs with.

    ``trainer`` is only handed on: to hooks and callbacks (their ``trainer`` argument) and to the Module
    (``module.trainer``). The loops read nothing from it.
    """

    fn: TrainerFn
    settings: Settings
    runtime: Runtime
    state: TrainerState
    metrics: MetricStore
    train_results: Results
    context: RunContext
    callbacks: list[Callback]
    loggers: list[Logger]
    module: Module
    datamodule: DataModule | None
    trainer: TrainerLike
    #: The profiler given (a pass-through one too), set up and torn down around the run.
    profiler: Profiler | None = None
    #: ``weights_only`` for the checkpoints this run loads (None: tensors and plain data only).
    weights_only: bool | None = None
    #: predict keeps the predictions (``return_predictions`` was not False).
    keep_predictions: bool = True
    #: The entry point was given a model (not the last run's): evaluation's default checkpoint depends on it.
    model_given: bool = False
    #: Set up by ``lifecycle.setup``: the hook runner, and the callables each batch goes through.
    hooks: HookRunner | None = None
    move_batch: Callable[[Any, int], Any] | None = None
    training_step: Callable[..., Any] | None = None
    #: The fit loop of a fit (``trainer.fit_loop``); None in the other entry points.
    fit_loop: FitProgress | None = None
    #: What the loops wrap their hooks, steps and fetches with: None for no profiler (or a pass-through one), so
    #: an unprofiled run pays nothing.
    profiling: Profiler | None = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.profiling = None if isinstance(self.profiler, (PassThroughProfiler, type(None))) else self.profiler

    def resolve_hooks(self) -> HookRunner:
        """Resolve who overrides which hook, for the callbacks, Module and DataModule this run has now."""
        self.hooks = HookRunner(self.trainer, self.module, self.callbacks, self.datamodule, self.profiling)
        return self.hooks

    @property
    def stage(self) -> str:
        """What ``setup`` and ``teardown`` are called with: ``"fit"``, ``"validate"``, ``"test"`` or ``"predict"``."""
        return "fit" if self.fn == TrainerFn.FITTING else self.fn.value

    @property
    def model(self) -> torch.nn.Module | None:
        """The Module as the strategy set it up (wrapped for DDP, sharded ...), kept while the Module stays."""
        return self.context.model

    @property
    def is_global_zero(self) -> bool:
        """Whether this process is global rank 0."""
        return self.runtime.is_global_zero

    @property
    def world_size(self) -> int:
        """Number of processes taking part."""
        return self.runtime.world_size

    @property
    def global_rank(self) -> int:
        """This process's index among all processes."""
        return self.runtime.global_rank

    @property
    def epoch_limit(self) -> int:
        """``max_epochs`` as training applies it (``Settings.epoch_limit``; a ``Timer`` callback bounds the run)."""
        return self.settings.epoch_limit(any(isinstance(callback, Timer) for callback in self.callbacks))

    @property
    def checkpoint_callbacks(self) -> list[Callback]:
        """The checkpoint-saving callbacks (``Checkpoint`` subclasses, and any other with ``runs_last``)."""
        return [callback for callback in self.callbacks if callback.runs_last]

    @property
    def num_sanity_val_batches(self) -> list[float]:
        """Validation batches per loader that the sanity check runs."""
        return [min(self.settings.sanity_steps, n) for n in self.context.val_batch_counts]

    def settle_epoch_limits(self) -> None:
        """``max_epochs`` becomes the epoch limit fit applies (1000 or -1 where None was given), as Lightning's
        Trainer does at fit's start; the Trainer's ``max_epochs`` shows it (its settings are its last Run's)."""
        self.settings = dataclasses.replace(self.settings, max_epochs=self.epoch_limit)

    def step_function(self, name: str) -> Callable[..., Any]:
        """The callable that runs the step method ``name`` (e.g. ``"validation_step"``) on the set-up model."""
        return self.runtime.strategy.step_function(self.model, name, method=self.context.compiled_steps.method(name))
