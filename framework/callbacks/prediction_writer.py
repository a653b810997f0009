"""``BasePredictionWriter``: write predictions to disk as ``predict`` makes them, or all at its end."""

from collections.abc import Sequence
from enum import Enum
from typing import Any

from framework.callbacks.base import Callback
from framework.errors import MisconfigurationError, describe
from framework.protocols import TrainerLike


class WriteInterval(Enum):
    """When a prediction writer writes."""

    BATCH = "batch"
    EPOCH = "epoch"
    BATCH_AND_EPOCH = "batch_and_epoch"

    @property
    def on_batch(self) -> bool:
        """After each batch."""
        return self in (WriteInterval.BATCH, WriteInterval.BATCH_AND_EPOCH)

    @property
    def on_epoch(self) -> bool:
        """Once, with every prediction."""
        return self in (WriteInterval.EPOCH, WriteInterval.BATCH_AND_EPOCH)


class BasePredictionWriter(Callback):
    """Subclass and implement ``write_on_batch_end`` (``write_interval="batch"``), ``write_on_epoch_end``
    (``"epoch"``) or both (``"batch_and_epoch"``). ``batch_indices`` are the dataset indices of the samples of
    each batch (this rank's, in a distributed run; None for a loader without a batch sampler), so predictions
    can be matched to their inputs. Epoch writers get the predictions even with ``return_predictions=False``.

    :param write_interval: when to write: ``"batch"`` (default), ``"epoch"`` or ``"batch_and_epoch"``.
    :raises MisconfigurationError: where ``write_interval`` is none of "batch", "epoch" and "batch_and_epoch".

    Example::

        class PerRankWriter(BasePredictionWriter):
            def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
                torch.save({"predictions": predictions, "indices": batch_indices},
                           f"predictions-{trainer.global_rank}.pt")

        trainer.predict(model, loader, return_predictions=False)   # with callbacks=[PerRankWriter("epoch")]
    """

    def __init__(self, write_interval: str = "batch") -> None:
        try:
            self.interval = WriteInterval(write_interval)
        except ValueError:
            raise MisconfigurationError(f"BasePredictionWriter(write_interval={describe(write_interval)}): accepted "
                                        f"{[interval.value for interval in WriteInterval]}.") from None

    def write_on_batch_end(self, trainer: TrainerLike, pl_module: Any, prediction: Any,
                           batch_indices: Sequence[int] | None, batch: Any, batch_idx: int,
                           dataloader_idx: int) -> None:
        """Write one batch's ``prediction``.

        :param trainer: the Trainer running ``predict``.
        :param pl_module: the Module predicting.
        :param prediction: what ``predict_step`` returned for the batch.
        :param batch_indices: the dataset indices of the batch's samples (this rank's), or None.
        :param batch: the batch.
        :param batch_idx: the batch's index in its loader.
        :param dataloader_idx: the loader's index.
        """
        raise NotImplementedError(f"{type(self).__name__} writes on each batch: implement write_on_batch_end.")

    def write_on_epoch_end(self, trainer: TrainerLike, pl_module: Any, predictions: Sequence[Any],
                           batch_indices: Sequence[Any]) -> None:
        """Write every prediction (one list per loader when there are several; ``batch_indices``: per loader)."""
        raise NotImplementedError(f"{type(self).__name__} writes at the end: implement write_on_epoch_end.")

    def on_predict_batch_end(self, trainer: TrainerLike, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                             dataloader_idx: int = 0) -> None:
        """Hand the batch's prediction to ``write_on_batch_end``."""
        if self.interval.on_batch:
            self.write_on_batch_end(trainer, pl_module, outputs, trainer.predict_loop.current_batch_indices, batch,
                                    batch_idx, dataloader_idx)

    def on_predict_epoch_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Hand every prediction to ``write_on_epoch_end``."""
        if self.interval.on_epoch:
            state = trainer.predict_loop
            self.write_on_epoch_end(trainer, pl_module, state.predictions, state.epoch_batch_indices)
