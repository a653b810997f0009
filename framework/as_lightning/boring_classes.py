"""Lightning's ``demos.boring_classes``: the tiny model, data module and random datasets that Lightning's tests
and the tests of libraries built on it start from.

``BoringModel`` is a ``Linear(32, 2)`` trained towards ones by SGD (lr 0.1, a StepLR each epoch) on 64 random
vectors of 32 numbers, one per batch; subclass it and override what a test is about.

Example::

    class CountingModel(BoringModel):
        def on_train_epoch_end(self):
            self.epochs_seen += 1
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

from framework.datamodule import DataModule
from framework.module import Module

__all__ = ["BoringDataModule", "BoringModel", "DemoModel", "ManualOptimBoringModel", "RandomDataset",
           "RandomDictDataset", "RandomIterableDataset", "RandomIterableDatasetWithLen"]


class RandomDataset(Dataset):
    """``length`` random vectors of ``size`` numbers, drawn once."""

    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> Tensor:
        return self.data[index]

    def __len__(self) -> int:
        return self.len


class RandomDictDataset(RandomDataset):
    """As ``RandomDataset``, each item a dict: ``{"a": vector, "b": vector + 2}``."""

    def __getitem__(self, index: int) -> dict[str, Tensor]:  # type: ignore[override]
        vector = self.data[index]
        return {"a": vector, "b": vector + 2}


class RandomIterableDataset(IterableDataset):
    """``count`` random vectors of ``size`` numbers, drawn as iterated; no length."""

    def __init__(self, size: int, count: int) -> None:
        self.size = size
        self.count = count

    def __iter__(self) -> Iterator[Tensor]:
        for _ in range(self.count):
            yield torch.randn(self.size)


class RandomIterableDatasetWithLen(RandomIterableDataset):
    """As ``RandomIterableDataset``, with a length."""

    def __len__(self) -> int:
        return self.count


class BoringModel(Module):
    """A ``Linear(32, 2)`` pulled towards ones; every loader gives 64 random vectors, one per batch."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(32, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x)

    def loss(self, preds: Tensor, labels: Tensor | None = None) -> Tensor:
        return nn.functional.mse_loss(preds, torch.ones_like(preds) if labels is None else labels)

    def step(self, batch: Tensor) -> Tensor:
        return self.loss(self(batch))

    def training_step(self, batch: Tensor, batch_idx: int) -> Any:
        return {"loss": self.step(batch)}

    def validation_step(self, batch: Tensor, batch_idx: int) -> Any:
        return {"x": self.step(batch)}

    def test_step(self, batch: Tensor, batch_idx: int) -> Any:
        return {"y": self.step(batch)}

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.layer.parameters(), lr=0.1)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def val_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def test_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))


class ManualOptimBoringModel(BoringModel):
    """``BoringModel`` optimizing by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Tensor, batch_idx: int) -> Any:
        optimizer = self.optimizers()
        loss = self.step(batch)
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss


class BoringDataModule(DataModule):
    """256 random vectors: the first 64 train, the next validate, then test, then predict."""

    def __init__(self) -> None:
        super().__init__()
        self.random_full = RandomDataset(32, 64 * 4)

    def setup(self, stage: str) -> None:
        parts = {"fit": ("random_train", 0), "validate": ("random_val", 1), "test": ("random_test", 2),
                 "predict": ("random_predict", 3)}
        names = [parts[stage]] + ([parts["validate"]] if stage == "fit" else [])
        for name, quarter in names:
            setattr(self, name, Subset(self.random_full, range(64 * quarter, 64 * (quarter + 1))))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.random_predict)


class DemoModel(Module):
    """A ``Linear(32, out_dim)`` with a ReLU whose output's sum is the loss, trained by Adam."""

    def __init__(self, out_dim: int = 10, learning_rate: float = 0.02) -> None:
        super().__init__()
        self.l1 = nn.Linear(32, out_dim)
        self.learning_rate = learning_rate

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.l1(x.view(x.size(0), -1)))

    def training_step(self, batch: Tensor, batch_idx: int) -> Any:
        return self(batch).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)
