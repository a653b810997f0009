"""Find the largest batch size that fits: grow it until out-of-memory (or the dataset's size), in trial runs."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any

import torch

from framework import console
from framework.errors import MisconfigurationError, describe, is_out_of_memory
from framework.tuner.attributes import holder_of, write_value
from framework.tuner.trials import model_kept, trial_trainer

if TYPE_CHECKING:
    from framework.trainer.trainer import Trainer

_MODES = ("power", "binsearch")


def scale_batch_size(trainer: Trainer, model: Any, datamodule: Any = None, mode: str = "power",
                     steps_per_trial: int = 3, init_val: int = 2, max_trials: int = 25,
                     batch_arg_name: str = "batch_size") -> int:
    """See ``Tuner.scale_batch_size``."""
    if mode not in _MODES:
        raise MisconfigurationError(f"scale_batch_size(mode={describe(mode)}): accepted {list(_MODES)}.")
    for name, value, least in (("steps_per_trial", steps_per_trial, 1), ("init_val", init_val, 1),
                               ("max_trials", max_trials, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise MisconfigurationError(f"scale_batch_size({name}={describe(value)}): accepted an int >= {least}.")
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
    def __init__(self, trainer: Trainer, model: Any, datamodule: Any, owner: Any, name: str, steps: int) -> None:
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
