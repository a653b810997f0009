"""``Tuner``: search a Trainer's hyperparameters before training, as Lightning's ``Tuner``."""

from typing import Any

from framework.callbacks.batch_size_finder import scale_batch_size
from framework.callbacks.lr_finder import LRFinder, lr_find
from framework.errors import MisconfigurationError


class Tuner:
    """Runs searches with trial runs made like ``trainer`` (which stays as it was), on the Module to train; the
    Module ends attached to ``trainer`` (``model.trainer``, ``model.logger``), as after Lightning's searches.

    Example::

        tuner = Tuner(trainer)
        finder = tuner.lr_find(model)            # sets model.lr (or hparams.lr) to the suggestion
        finder.plot(suggest=True)
        trainer.fit(model)
    """

    def __init__(self, trainer: Any) -> None:  # Any: a command line built from this signature needs a type
        self._trainer = trainer

    def lr_find(self, model: Any, train_dataloaders: Any = None, val_dataloaders: Any = None,
                dataloaders: Any = None, datamodule: Any = None, method: str = "fit", min_lr: float = 1e-8,
                max_lr: float = 1.0, num_training: int = 100, mode: str = "exponential",
                early_stop_threshold: float | None = 4.0, update_attr: bool = True, attr_name: str = "") -> LRFinder:
        """Train ``num_training`` steps with the learning rate growing from ``min_lr`` to ``max_lr`` (``mode``
        "exponential" or "linear"), stopping early once the loss exceeds ``early_stop_threshold`` times its best;
        with ``update_attr``, write the suggestion to the Module's ``lr``/``learning_rate`` (or ``attr_name``),
        attribute or hyperparameter. The Module's weights are put back afterwards.

        :raises MisconfigurationError: where ``method`` is not "fit".
        """
        if method != "fit":
            raise MisconfigurationError(f"lr_find(method={method!r}): only 'fit' is supported.")
        return lr_find(self._trainer, model, train_dataloaders if train_dataloaders is not None else dataloaders,
                       val_dataloaders, datamodule, min_lr, max_lr, num_training, mode, early_stop_threshold,
                       update_attr, attr_name)

    def scale_batch_size(self, model: Any, train_dataloaders: Any = None, val_dataloaders: Any = None,
                         dataloaders: Any = None, datamodule: Any = None, method: str = "fit", mode: str = "power",
                         steps_per_trial: int = 3, init_val: int = 2, max_trials: int = 25,
                         batch_arg_name: str = "batch_size") -> int:
        """Grow the batch size the Module or DataModule holds in ``batch_arg_name`` (attribute or
        hyperparameter), from ``init_val``, doubling (``mode="power"``) until a trial of ``steps_per_trial`` steps
        runs out of memory or the training dataset is used whole, then with ``mode="binsearch"`` narrowing
        between the last size that fit and the first that did not; set and return the size found. The loaders
        must come from ``train_dataloader()`` reading that value, not be passed in. Weights are put back.

        :raises MisconfigurationError: where loaders are passed (``train_dataloaders``, ``val_dataloaders`` or
            ``dataloaders``), or ``method`` is not "fit".
        """
        if any(loaders is not None for loaders in (train_dataloaders, val_dataloaders, dataloaders)):
            raise MisconfigurationError("The batch scaling feature cannot be used with dataloaders passed directly: "
                                        "build them in the Module's or DataModule's train_dataloader() from "
                                        f"self.{batch_arg_name}, so each trial can change it.")
        if method != "fit":
            raise MisconfigurationError(f"scale_batch_size(method={method!r}): only 'fit' is supported.")
        return scale_batch_size(self._trainer, model, datamodule, mode, steps_per_trial, init_val, max_trials,
                                batch_arg_name)
