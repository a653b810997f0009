"""Quickstart: classify handwritten digits with a small MLP, on CPU, in well under a minute.

The data set is scikit-learn's 8x8 handwritten digits (1,797 images, shipped inside the
scikit-learn package, so nothing is downloaded). Run it from the repository root:

    python tutorials/01_quickstart.py

It trains for a few epochs, then prints the validation accuracy.
"""

from __future__ import annotations

import torch
import torchmetrics
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

import framework as L


class Digits(L.DataModule):
    """The digits, scaled to [0, 1], split 80/20 into training and validation sets."""

    def __init__(self, batch_size: int = 64) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        images, labels = load_digits(return_X_y=True)
        dataset = TensorDataset(torch.tensor(images / 16.0, dtype=torch.float32), torch.tensor(labels))
        split = torch.Generator().manual_seed(0)
        self.train_set, self.val_set = random_split(dataset, [0.8, 0.2], generator=split)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=256)


class DigitClassifier(L.Module):
    """A two-layer MLP over the 64 pixels."""

    def __init__(self, hidden: int = 128, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
        self.val_accuracy = torchmetrics.classification.MulticlassAccuracy(num_classes=10, average="micro")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.val_accuracy(logits, y)
        self.log("val_loss", nn.functional.cross_entropy(logits, y))
        self.log("val_acc", self.val_accuracy, prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    L.seed_everything(0)
    model = DigitClassifier()
    trainer = L.Trainer(max_epochs=15, accelerator="cpu", logger=False, enable_checkpointing=False)
    trainer.fit(model, datamodule=Digits())
    results = trainer.validate(model, datamodule=Digits(), verbose=False)
    print(f"validation accuracy: {results[0]['val_acc']:.3f}")


if __name__ == "__main__":
    main()
