"""``LearningRateFinder``: the learning-rate range test when fit starts, its suggestion applied to the run."""

from typing import Any

from framework.callbacks.base import Callback
from framework.errors import MisconfigurationError


class LearningRateFinder(Callback):
    """Run ``Tuner.lr_find`` when fit starts (on its own trial runs) and train with the suggested learning rate:
    it is written to the Module's ``lr``/``learning_rate`` (or ``attr_name``) and to the optimizer's parameter
    groups. ``optimal_lr`` holds the finder. One process only: under several, run the Tuner before fit.

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

    def lr_find(self, trainer: Any, pl_module: Any) -> None:
        """Search, and apply the suggestion to the running optimizer."""
        from framework.tuner.lr_finder import lr_find  # the tuner runs Trainers: imported when used

        if trainer.world_size > 1:
            raise MisconfigurationError("LearningRateFinder runs in one process only: with several, call "
                                        "Tuner(trainer).lr_find(model) before fit.")
        self.optimal_lr = lr_find(trainer, pl_module, trainer.given_loaders.get("train"),
                                  datamodule=trainer.datamodule, **self._settings)
        suggested = self.optimal_lr.suggestion() if self._update_attr else None
        if suggested is not None:
            for optimizer in trainer.optimizers:
                for group in optimizer.param_groups:
                    group["lr"] = suggested

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Search before training starts (override to search at other times, e.g. ``on_train_epoch_start``)."""
        self.lr_find(trainer, pl_module)
