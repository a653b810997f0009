"""``Tuner``: search a Trainer's hyperparameters before training, as Lightning's ``Tuner``."""

from __future__ import annotations

from typing import Any

from framework.tuner.lr_finder import LRFinder, lr_find


class Tuner:
    """Runs searches with trial runs made like ``trainer`` (which stays as it was), on the Module to train.

    Example::

        tuner = Tuner(trainer)
        finder = tuner.lr_find(model)            # sets model.lr (or hparams.lr) to the suggestion
        finder.plot(suggest=True)
        trainer.fit(model)
    """

    def __init__(self, trainer: Any) -> None:
        self._trainer = trainer

    def lr_find(self, model: Any, train_dataloaders: Any = None, val_dataloaders: Any = None,
                dataloaders: Any = None, datamodule: Any = None, method: str = "fit", min_lr: float = 1e-8,
                max_lr: float = 1.0, num_training: int = 100, mode: str = "exponential",
                early_stop_threshold: float | None = 4.0, update_attr: bool = True, attr_name: str = "") -> LRFinder:
        """Train ``num_training`` steps with the learning rate growing from ``min_lr`` to ``max_lr`` (``mode``
        "exponential" or "linear"), stopping early once the loss exceeds ``early_stop_threshold`` times its best;
        with ``update_attr``, write the suggestion to the Module's ``lr``/``learning_rate`` (or ``attr_name``),
        attribute or hyperparameter. The Module's weights are put back afterwards."""
        if method != "fit":
            from framework.errors import MisconfigurationError

            raise MisconfigurationError(f"lr_find(method={method!r}): only 'fit' is supported.")
        return lr_find(self._trainer, model, train_dataloaders if train_dataloaders is not None else dataloaders,
                       val_dataloaders, datamodule, min_lr, max_lr, num_training, mode, early_stop_threshold,
                       update_attr, attr_name)
