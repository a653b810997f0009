"""What ``predict`` keeps for prediction writers: each batch's sample indices, and the predictions.

``trainer.predict_loop`` holds them under Lightning's names (``predictions``, ``epoch_batch_indices``,
``current_batch_indices``), so a writer learns which dataset samples each prediction belongs to.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset, Sampler

from framework.runtime.data_split import rebuilt_with_batch_sampler


class IndexRecordingBatchSampler(Sampler):
    """A batch sampler that remembers the indices of every batch it hands out in the current pass."""

    def __init__(self, batch_sampler: Any) -> None:
        self.batch_sampler = batch_sampler
        self.seen: list[list[int]] = []

    def __iter__(self) -> Iterator[list[int]]:
        self.seen = []
        for indices in self.batch_sampler:
            self.seen.append(list(indices))
            yield indices

    def __len__(self) -> int:
        return len(self.batch_sampler)


def recording_indices(loader: Any) -> tuple[Any, IndexRecordingBatchSampler | None]:
    """``loader`` rebuilt to record its batches' indices, and the recorder; a loader it cannot rebuild (an
    iterable, an IterableDataset, no batch sampler) as it is, with None."""
    if not isinstance(loader, DataLoader) or loader.batch_sampler is None or isinstance(loader.dataset,
                                                                                          IterableDataset):
        return loader, None
    recorder = IndexRecordingBatchSampler(loader.batch_sampler)
    return rebuilt_with_batch_sampler(loader, recorder), recorder


class PredictionState:
    """``trainer.predict_loop``: the predictions of the last ``predict`` and the sample indices of its batches."""

    def __init__(self, loaders: int = 0) -> None:
        self._predictions: list[list[Any]] = [[] for _ in range(loaders)]
        self.epoch_batch_indices: list[list[list[int]]] = [[] for _ in range(loaders)]  # loaders x batches x samples
        self.current_batch_indices: list[int] | None = None
        self.recorders: list[IndexRecordingBatchSampler | None] = []

    @property
    def predictions(self) -> list[Any]:
        """The kept predictions: one list per loader, or the list itself with one loader."""
        return self._predictions[0] if len(self._predictions) == 1 else self._predictions

    def note_batch(self, dataloader_idx: int, batch_idx: int, keep_indices: bool) -> None:
        """Learn the indices of the batch about to run."""
        recorder = self.recorders[dataloader_idx] if self.recorders else None
        self.current_batch_indices = recorder.seen[batch_idx] if recorder is not None else None
        if keep_indices and self.current_batch_indices is not None:
            self.epoch_batch_indices[dataloader_idx].append(self.current_batch_indices)
