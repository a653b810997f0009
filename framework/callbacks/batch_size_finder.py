"""Find the largest batch size that fits (``scale_batch_size``, what ``Tuner.scale_batch_size`` runs): grow it
until out-of-memory (or the dataset's size), in trial runs; and ``BatchSizeFinder``, the callback running it when
fit starts. It takes the Trainer it acts on as an argument and starts trial runs of that Trainer's class.

No ``from __future__ import annotations`` here: tools that build a command line from a constructor read
``inspect.signature(cls)`` and need each annotation as a type (see ``framework.callbacks``).
"""

import gc
from typing import Any

import torch

from framework import console
from framework.callbacks.base import Callback
from framework.callbacks.tuning_trials import holder_of, model_kept, trial_trainer, write_value
from framework.checks import check_int
from framework.errors import MisconfigurationError, describe, is_out_of_memory
from framework.protocols import TrainerLike

_MODES = ("power", "binsearch")


def scale_batch_size(trainer: TrainerLike, model: Any, datamodule: Any = None, mode: str = "power",
                     steps_per_trial: int = 3, init_val: int = 2, max_trials: int = 25,
                     batch_arg_name: str = "batch_size") -> int:
    """See ``Tuner.scale_batch_size``."""
    if mode not in _MODES:
        raise MisconfigurationError(f"scale_batch_size(mode={describe(mode)}): accepted {list(_MODES)}.")
    for name, value, least in (("steps_per_trial", steps_per_trial, 1), ("init_val", init_val, 1),
                               ("max_trials", max_trials, 1)):
        check_int("scale_batch_size", name, value, least)
    owner = holder_of(batch_arg_name, model, datamodule)
    if owner is None:
        raise MisconfigurationError(f"Field {batch_arg_name} not found in `model`, `datamodule`, nor their `hparams` "
                                    "attributes: the loaders must read the batch size from there for the search to "
                                    "change it.")
    search = _Search(trainer, model, datamodule, owner, batch_arg_name, steps_per_trial)
    with model_kept(model, trainer):
        found = search.power(init_val, max_trials)
        if mode == "binsearch" and search.failed_at is not None:
            found = search.bisect(found, search.failed_at)
    write_value(owner, batch_arg_name, found)
    console.info(f"Finished batch size finder, will continue with full run using batch size {found}")
    return found


class _Search:
    def __init__(self, trainer: TrainerLike, model: Any, datamodule: Any, owner: Any, name: str, steps: int) -> None:
        self.trainer, self.model, self.datamodule, self.owner, self.name, self.steps = (
            trainer, model, datamodule, owner, name, steps)
        self.trials = 0
        self.failed_at: int | None = None
        self.dataset_size: int | None = None

    def power(self, size: int, max_trials: int) -> int:
        """Double until a trial fails, the dataset is used whole, or ``max_trials``; the last size that fit."""
        fitted = None
        while self.trials < max_trials:
            if not self.fits(size):
                self.failed_at = size
                break
            fitted = size
            if self.dataset_size is not None and size >= self.dataset_size:
                break
            size *= 2
        if fitted is None:
            raise MisconfigurationError(f"scale_batch_size: even {self.name}={size} ran out of memory. Lower init_val "
                                        "or make the model smaller.")
        return min(fitted, self.dataset_size) if self.dataset_size is not None else fitted

    def bisect(self, low: int, high: int) -> int:
        """Between a size that fits and one that does not: the largest that fits."""
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if self.fits(middle) else (low, middle)
        return low

    def fits(self, size: int) -> bool:
        self.trials += 1
        write_value(self.owner, self.name, size)
        run = trial_trainer(self.trainer, [], max_steps=self.steps, max_epochs=-1, max_time=None,
                            limit_train_batches=self.steps, limit_val_batches=0, num_sanity_val_steps=0,
                            val_check_interval=None, check_val_every_n_epoch=1)
        try:
            run.fit(self.model, datamodule=self.datamodule)
        except BaseException as error:
            if not is_out_of_memory(error):
                raise
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            return False
        dataset = getattr(run.train_dataloader, "dataset", None)
        try:
            self.dataset_size = len(dataset) if dataset is not None else None
        except TypeError:
            self.dataset_size = None
        return True


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

    def setup(self, trainer: TrainerLike, pl_module: Any, stage: str) -> None:
        """Refuse what the search cannot work with.

        :raises MisconfigurationError: where a fit runs on several processes, or with loaders passed to ``fit``.
        """
        if stage != "fit":
            return
        if trainer.world_size > 1:
            raise MisconfigurationError("The Batch size finder is not supported with distributed strategies: call "
                                        "Tuner(trainer).scale_batch_size(model) before fit.")
        if any(trainer.run_context.given_loaders.get(stage) is not None for stage in ("train", "val")):
            raise MisconfigurationError("The Batch size finder cannot be used with dataloaders passed directly to "
                                        "`.fit()`: build them in the Module's or DataModule's train_dataloader().")

    def scale_batch_size(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Search, and make the run ask for its loaders again."""
        self.optimal_batch_size = scale_batch_size(trainer, pl_module, trainer.datamodule, **self._settings)
        trainer.run_context.forget_fit_data()  # the run asks for its loaders again, built with the size found

    def on_fit_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Search before training starts."""
        self.scale_batch_size(trainer, pl_module)
