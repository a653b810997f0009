"""``TrainerLike``: the Trainer as callbacks, the Module and the DataModule see it.

They receive the Trainer (``Callback`` hooks' ``trainer`` argument, ``module.trainer``) but sit below it in the
layers (``framework.trainer`` imports them), so they are typed with this protocol instead of importing the Trainer:
``framework.Trainer`` has every member listed here (a test keeps it so), with the meaning its own reference gives.
Members whose type lives above these layers (the Runtime, the Strategy, the run's state ...) are typed ``Any``;
the Trainer's reference names their classes.

Example::

    class PrintLoss(Callback):
        def on_train_epoch_end(self, trainer: TrainerLike, pl_module: Module) -> None:
            print(trainer.current_epoch, trainer.callback_metrics.get("loss"))
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = ["TrainerLike"]


@runtime_checkable
class TrainerLike(Protocol):
    """What a Trainer offers the objects it runs (see ``framework.Trainer`` for each member)."""

    # what runs, and the objects it runs with
    runtime: Any
    strategy: Any
    state: Any
    loggers: list[Any]
    logger: Any
    callbacks: list[Any]
    checkpoint_callbacks: list[Any]
    checkpoint_io: Any
    model: torch.nn.Module | None
    datamodule: Any
    optimizers: list[torch.optim.Optimizer]
    lr_scheduler_configs: list[Any]
    predict_loop: Any
    fit_loop: Any
    run_context: Any
    #: The arguments the Trainer was made with, to make another like it (the searches' trial runs).
    _init_arguments: dict[str, Any]

    # counters and stages
    current_epoch: int
    global_step: int
    should_stop: bool
    sanity_checking: bool
    training: bool
    validating: bool
    testing: bool
    predicting: bool
    is_last_batch: bool
    epoch_limit: int
    estimated_stepping_batches: float
    enable_validation: bool

    # ranks
    world_size: int
    global_rank: int
    local_rank: int
    node_rank: int
    is_global_zero: bool

    # metrics
    callback_metrics: dict[str, Any]
    logged_metrics: dict[str, Any]
    progress_bar_metrics: dict[str, Any]

    # data
    train_dataloader: Iterable | None
    num_training_batches: float
    num_val_batches: list[float]
    num_sanity_val_batches: list[float]
    num_test_batches: list[float]
    num_predict_batches: list[float]

    # settings (the Trainer's arguments)
    max_epochs: int | None
    min_epochs: int | None
    max_steps: int
    min_steps: int | None
    fast_dev_run: int
    log_every_n_steps: int
    check_val_every_n_epoch: int | None
    val_check_interval: int | float
    accumulate_grad_batches: int
    default_root_dir: str
    log_dir: str | None
    ckpt_path: str | None

    def fit(self, model: Any, *args: Any, **kwargs: Any) -> None:
        """Train ``model`` (as ``Trainer.fit``; the searches of the tuner run trial fits with it)."""

    def validate(self, model: Any = None, *args: Any, **kwargs: Any) -> list[dict[str, float]]:
        """Run the validation loop once (as ``Trainer.validate``); returns the metrics of each loader."""

    def test(self, model: Any = None, *args: Any, **kwargs: Any) -> list[dict[str, float]]:
        """Run the test loop (as ``Trainer.test``); returns the metrics of each loader."""

    def predict(self, model: Any = None, *args: Any, **kwargs: Any) -> list[Any] | None:
        """Run the predict loop (as ``Trainer.predict``); returns the predictions."""

    def save_checkpoint(self, filepath: str | os.PathLike, weights_only: bool | None = None,
                        storage_options: dict[str, Any] | None = None) -> None:
        """Write the run's checkpoint to ``filepath`` (as ``Trainer.save_checkpoint``; callbacks save with it)."""
