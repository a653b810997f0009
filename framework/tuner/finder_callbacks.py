"""The tuner's searches as callbacks, run when fit starts: ``BatchSizeFinder`` and ``LearningRateFinder``.

They live with the tuner, whose trial runs they start; ``framework.callbacks`` offers them under Lightning's
import paths. No ``from __future__ import annotations`` here: tools that build a command line from a
constructor read ``inspect.signature(cls)`` and need each annotation as a type (see ``framework.callbacks``).
"""

from typing import TYPE_CHECKING, Any

from framework.callbacks.base import Callback
from framework.errors import MisconfigurationError
from framework.trainer.data import forget_fit_data
from framework.tuner.batch_size_scaling import scale_batch_size
from framework.tuner.lr_finder import lr_find

if TYPE_CHECKING:
    from framework.trainer.trainer import Trainer


class BatchSizeFinder(Callback):
    """Run ``Tuner.scale_batch_size`` when fit starts and train with the size found (the loaders are asked for
    again). ``optimal_batch_size`` holds it. One process only, with the loaders built by the Module or DataModule
    from ``batch_arg_name``.

    The arguments are checked when the search runs (fit's start), not here.

    :param mode: ``"power"`` (the default): double the size until a trial runs out of memory or the training
        dataset is used whole; ``"binsearch"``: the same, then, where a size ran out of memory, narrow down between
        it and the last size that fit.
    :param steps_per_trial: training steps each trial runs (an int >= 1, default 3); no validation runs in a trial.
    :param init_val: the first batch size tried (an int >= 1, default 2); ``optimal_batch_size`` until the search.
    :param max_trials: the most trials while doubling (an int >= 1, default 25); ``"binsearch"``'s narrowing
        runs its trials on top of these.
    :param batch_arg_name: the attribute or hyperparameter holding the batch size the loaders are built with: the
        Module's, else the DataModule's; default ``"batch_size"``.

    Example::

        Trainer(callbacks=[BatchSizeFinder(mode="binsearch", init_val=16)])
    """

    def __init__(self, mode: str = "power", steps_per_trial: int = 3, init_val: int = 2, max_trials: int = 25,
                 batch_arg_name: str = "batch_size") -> None:
        self._settings = dict(mode=mode, steps_per_trial=steps_per_trial, init_val=init_val, max_trials=max_trials,
                              batch_arg_name=batch_arg_name)
        self.optimal_batch_size: int | None = init_val

    def setup(self, trainer: "Trainer", pl_module: Any, stage: str) -> None:
        """Refuse what the search cannot work with."""
        if stage != "fit":
            return
        if trainer.world_size > 1:
            raise MisconfigurationError("The Batch size finder is not supported with distributed strategies: call "
                                        "Tuner(trainer).scale_batch_size(model) before fit.")
        if any(trainer.run_context.given_loaders.get(stage) is not None for stage in ("train", "val")):
            raise MisconfigurationError("The Batch size finder cannot be used with dataloaders passed directly to "
                                        "`.fit()`: build them in the Module's or DataModule's train_dataloader().")

    def scale_batch_size(self, trainer: "Trainer", pl_module: Any) -> None:
        """Search, and make the run ask for its loaders again."""
        self.optimal_batch_size = scale_batch_size(trainer, pl_module, trainer.datamodule, **self._settings)
        forget_fit_data(trainer._current_run)

    def on_fit_start(self, trainer: "Trainer", pl_module: Any) -> None:
        """Search before training starts."""
        self.scale_batch_size(trainer, pl_module)


class LearningRateFinder(Callback):
    """Run ``Tuner.lr_find`` when fit starts (on its own trial runs) and train with the suggested learning rate:
    it is written to the Module's ``lr``/``learning_rate`` (or ``attr_name``) and to the optimizer's parameter
    groups. ``optimal_lr`` holds the finder. One process only: under several, run the Tuner before fit.

    The arguments are checked when the search runs (fit's start), not here.

    :param min_lr: the learning rate of the first step (default 1e-8); ``0 < min_lr < max_lr``.
    :param max_lr: the top of the range (default 1.0): step ``i`` (from 0) trains ``i / num_training_steps`` of
        the way up from ``min_lr`` (on a log scale when exponential), so the last step stays just below it.
    :param num_training_steps: how many optimizer steps the search trains (an int >= 2, default 100), fewer when
        it stops early; the Module's LR schedulers are left out of it.
    :param mode: how the learning rate grows between them: ``"exponential"`` (the default) or ``"linear"``.
    :param early_stop_threshold: stop once the smoothed loss exceeds this many times its lowest (default 4.0);
        ``None``: only a loss that is not finite stops it.
    :param update_attr: ``True`` (the default) writes the suggestion, when there is one, to the Module and the
        optimizer; ``False`` writes nothing (``optimal_lr.suggestion()`` still gives it).
    :param attr_name: the Module's attribute or hyperparameter taking the suggestion; ``""`` (the default):
        ``lr``, else ``learning_rate``. With ``update_attr``, a Module without it is refused.

    Example::

        trainer = Trainer(callbacks=[LearningRateFinder(num_training_steps=50)])
        trainer.fit(model)
    """

    def __init__(self, min_lr: float = 1e-8, max_lr: float = 1.0, num_training_steps: int = 100,
                 mode: str = "exponential", early_stop_threshold: float | None = 4.0, update_attr: bool = True,
                 attr_name: str = "") -> None:
        self._settings = dict(min_lr=min_lr, max_lr=max_lr, num_training=num_training_steps, mode=mode,
                              early_stop_threshold=early_stop_threshold, update_attr=update_attr, attr_name=attr_name)
        self._update_attr = update_attr
        self.optimal_lr: Any = None

    def lr_find(self, trainer: "Trainer", pl_module: Any) -> None:
        """Search, and apply the suggestion to the running optimizer."""
        if trainer.world_size > 1:
            raise MisconfigurationError("LearningRateFinder runs in one process only: with several, call "
                                        "Tuner(trainer).lr_find(model) before fit.")
        self.optimal_lr = lr_find(trainer, pl_module, trainer.run_context.given_loaders.get("train"),
                                  datamodule=trainer.datamodule, **self._settings)
        suggested = self.optimal_lr.suggestion() if self._update_attr else None
        if suggested is not None:
            for optimizer in trainer.optimizers:
                for group in optimizer.param_groups:
                    group["lr"] = suggested

    def on_fit_start(self, trainer: "Trainer", pl_module: Any) -> None:
        """Search before training starts (override to search at other times, e.g. ``on_train_epoch_start``)."""
        self.lr_find(trainer, pl_module)
