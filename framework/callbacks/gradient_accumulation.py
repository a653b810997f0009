"""``GradientAccumulationScheduler``: change ``accumulate_grad_batches`` from given epochs on."""

from typing import Any

from framework.callbacks.base import Callback
from framework.checks import is_int
from framework.errors import MisconfigurationError, describe
from framework.protocols import TrainerLike


class GradientAccumulationScheduler(Callback):
    """Accumulate gradients over ``scheduling[epoch]`` batches from that epoch on (epochs count from 0; before the
    first key given, 1). It needs automatic optimization, and a Trainer whose ``accumulate_grad_batches`` is 1.

    :param scheduling: ``{epoch: batches}``, a non-empty dict of ints: epochs >= 0, batches >= 1.
    :raises MisconfigurationError: where ``scheduling`` is not a non-empty dict, a key is not an int >= 0, or a value
        is not an int >= 1.

    Example::

        # 1 batch per step in epochs 0-3, 4 in epochs 4-7, 8 from epoch 8 on
        Trainer(callbacks=[GradientAccumulationScheduler(scheduling={4: 4, 8: 8})])
    """

    def __init__(self, scheduling: dict[int, int]) -> None:
        if not isinstance(scheduling, dict) or not scheduling:
            raise MisconfigurationError(f"GradientAccumulationScheduler(scheduling={describe(scheduling)}): accepted "
                                        "is a non-empty dict {epoch: batches}, e.g. {0: 1, 4: 4}.")
        for epoch, factor in scheduling.items():
            if not is_int(epoch) or epoch < 0:
                raise MisconfigurationError(f"GradientAccumulationScheduler: epoch key {describe(epoch)} must be an "
                                            "int >= 0 (epochs count from 0).")
            if not is_int(factor) or factor < 1:
                raise MisconfigurationError(f"GradientAccumulationScheduler: the number of batches for epoch {epoch}, "
                                            f"{describe(factor)}, must be an int >= 1.")
        self.scheduling = dict(sorted({0: 1, **scheduling}.items()))
        self._set_by_us: int | None = None

    def going_to_accumulate_grad_batches(self) -> bool:
        """Whether some epoch accumulates more than one batch."""
        return any(factor != 1 for factor in self.scheduling.values())

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        """The number of batches accumulated per optimizer step in ``epoch``."""
        return next(factor for start, factor in reversed(self.scheduling.items()) if start <= epoch)

    def on_train_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Refuse what cannot work with a schedule: manual optimization, or the Trainer's own setting.

        :raises MisconfigurationError: where the Module optimizes manually, or the Trainer was given
            ``accumulate_grad_batches`` other than 1.
        """
        if not pl_module.automatic_optimization:
            raise MisconfigurationError("GradientAccumulationScheduler needs automatic optimization: under manual "
                                        "optimization training_step decides when to step. Remove the callback, or "
                                        "accumulate in training_step yourself.")
        if trainer.accumulate_grad_batches not in (1, self._set_by_us):
            raise MisconfigurationError(
                f"Trainer(accumulate_grad_batches={trainer.accumulate_grad_batches}) was given together with "
                "GradientAccumulationScheduler; remove one of them (the schedule can start at epoch 0)."
            )

    def on_train_epoch_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Apply this epoch's number of batches."""
        self._set_by_us = trainer.accumulate_grad_batches = self.get_accumulate_grad_batches(trainer.current_epoch)
