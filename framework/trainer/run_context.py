"""``RunContext``: what the runs of one Trainer (fit, validate, test, predict) share beyond its arguments, typed and
in one place: the Module as the strategy set it up, the optimizers of the Module trained, the loaders asked for and
their batch counts, the checkpoint loaded, the predictions kept.

The Trainer owns one and hands it to each ``Run`` (``run.context``); the loops and the data functions write into
it (nothing else sets these on the Trainer). Lightning's names for some of it are the Trainer's properties
(``trainer.optimizers``, ``trainer.num_training_batches``, ``trainer.val_check_batch``, ``trainer.predict_loop``
...).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from framework.trainer.compiled import CompiledSteps
from framework.trainer.prediction_state import PredictionState

if TYPE_CHECKING:
    import torch
    from torch.optim import Optimizer

    from framework.trainer.optimizer_proxy import OptimizerProxy
    from framework.utilities.types import LRSchedulerConfig


def _per_stage() -> dict[str, list[Any]]:
    return {"val": [], "test": [], "predict": []}


@dataclass(eq=False)
class RunContext:
    """The objects of the Trainer's current (or last) run, set as the run goes."""

    #: The Module as the strategy set it up (``trainer.model``), kept from run to run while the Module stays.
    model: torch.nn.Module | None = None
    #: ``model`` is set up for the Module now attached (a new Module is set up again).
    module_setup: bool = False
    #: From ``fit(torch.compile(model))``: the options its steps are compiled with.
    given_compiler: Any = None
    compiled_steps: CompiledSteps = field(default_factory=CompiledSteps)

    #: The loaders passed to the entry point (fit, validate ...), by stage ("train", "val", "test", "predict").
    given_loaders: dict[str, Any] = field(default_factory=dict)
    #: The Module's optimizers, set up by the runtime (kept from run to run while the Module stays the same).
    optimizers: list[Optimizer] = field(default_factory=list)
    lr_scheduler_configs: list[LRSchedulerConfig] = field(default_factory=list)
    #: What ``self.optimizers()`` hands a Module that optimizes by hand.
    manual_optimizers: list[OptimizerProxy] = field(default_factory=list)
    has_step_schedulers: bool = False
    train_loader: Iterable | None = None
    num_training_batches: float = math.inf
    #: Validate after every this many training batches (inf: at the epoch's end).
    val_check_batch: float = math.inf
    val_loaders: list[Iterable] = field(default_factory=list)
    val_batch_counts: list[float] = field(default_factory=list)
    #: This fit validates: a validation_step, validation data, a limit above 0.
    validates_in_fit: bool = False
    #: The loaders and batch counts of the last validate, test and predict.
    eval_loaders: dict[str, list[Iterable]] = field(default_factory=_per_stage)
    eval_batches: dict[str, list[float]] = field(default_factory=_per_stage)
    #: Stage -> the epoch its loaders were last asked for in.
    loaded_at: dict[str, int] = field(default_factory=dict)
    #: The checkpoint this run loaded (``trainer.ckpt_path``), None when it loaded none.
    ckpt_path: str | None = None
    #: On rank 0 of a fit: the preemption checkpoints it started with, removed once it has gone on past them.
    preemption_checkpoints: list[str] = field(default_factory=list)
    #: The last predict's predictions and batch indices, for prediction writers.
    predict_loop: PredictionState = field(default_factory=PredictionState)

    def forget_fit_data(self) -> None:
        """Make fit ask for its loaders again when it next needs them, as in Lightning: validation's at the sanity
        check, training's when training starts (or when ``estimated_stepping_batches`` is first read)."""
        self.train_loader, self.num_training_batches = None, math.inf
        self.val_loaders, self.val_batch_counts = [], []
        self.loaded_at.clear()
