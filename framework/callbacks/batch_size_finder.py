"""``BatchSizeFinder``: find the largest batch size that fits when fit starts, and train with it."""

from typing import Any

from framework.callbacks.base import Callback
from framework.errors import MisconfigurationError


class BatchSizeFinder(Callback):
    """Run ``Tuner.scale_batch_size`` when fit starts and train with the size found (the loaders are asked for
    again). ``optimal_batch_size`` holds it. One process only, with the loaders built by the Module or DataModule
    from ``batch_arg_name``.

    Example::

        Trainer(callbacks=[BatchSizeFinder(mode="binsearch", init_val=16)])
    """

    def __init__(self, mode: str = "power", steps_per_trial: int = 3, init_val: int = 2, max_trials: int = 25,
                 batch_arg_name: str = "batch_size") -> None:
        self._settings = dict(mode=mode, steps_per_trial=steps_per_trial, init_val=init_val, max_trials=max_trials,
                              batch_arg_name=batch_arg_name)
        self.optimal_batch_size: int | None = init_val

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Refuse what the search cannot work with."""
        if stage != "fit":
            return
        if trainer.world_size > 1:
            raise MisconfigurationError("The Batch size finder is not supported with distributed strategies: call "
                                        "Tuner(trainer).scale_batch_size(model) before fit.")
        if any(trainer.given_loaders.get(stage) is not None for stage in ("train", "val")):
            raise MisconfigurationError("The Batch size finder cannot be used with dataloaders passed directly to "
                                        "`.fit()`: build them in the Module's or DataModule's train_dataloader().")

    def scale_batch_size(self, trainer: Any, pl_module: Any) -> None:
        """Search, and make the run ask for its loaders again."""
        from framework.trainer.data import forget_fit_data
        from framework.tuner.batch_size_scaling import scale_batch_size  # the tuner runs Trainers

        self.optimal_batch_size = scale_batch_size(trainer, pl_module, trainer.datamodule, **self._settings)
        forget_fit_data(trainer)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Search before training starts."""
        self.scale_batch_size(trainer, pl_module)
