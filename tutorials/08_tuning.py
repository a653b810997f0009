"""Tuning before training: find a learning rate and a batch size, profile an epoch, write predictions to disk.

The digits of the quickstart again (scikit-learn's 8x8 images, nothing downloaded). Run it from the
repository root:

    python tutorials/08_tuning.py                    # writes into tutorial_logs/tuning/

1. ``Tuner.lr_find`` trains a few dozen steps while the learning rate grows from 1e-5 to 1 and suggests
   the one where the loss falls fastest; it writes it to the model's ``lr`` hyperparameter and puts the
   weights back. With matplotlib installed the loss curve is saved as ``lr_find.png``.
2. ``Tuner.scale_batch_size`` doubles the batch size in short trial runs until the device runs out of
   memory or the training set is used whole (on a CPU with this small model: the trials allowed), then
   keeps the largest that fit. Neither search changes the Trainer it was given.
3. ``fit`` with ``profiler=SimpleProfiler(...)`` writes ``fit-profile.txt``: the time spent in each profiled
   action (the step, backward, optimizer step, batch fetch and the hooks it times).
4. ``predict`` with a ``BasePredictionWriter`` writes each batch's predicted classes with the indices of
   its images in the data set, and returns nothing (``return_predictions=False``), as one does when
   the predictions would not fit in memory.
"""

from __future__ import annotations

import argparse
import importlib.util
import os

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

import framework as L
from framework.callbacks import BasePredictionWriter
from framework.profilers import SimpleProfiler
from framework.tuner import Tuner


def digits() -> tuple[TensorDataset, TensorDataset]:
    images, labels = load_digits(return_X_y=True)
    dataset = TensorDataset(torch.tensor(images / 16.0, dtype=torch.float32), torch.tensor(labels))
    train, test = random_split(dataset, [0.8, 0.2], generator=torch.Generator().manual_seed(0))
    return train, test


class DigitClassifier(L.Module):
    """An MLP whose learning rate and batch size are hyperparameters, for the Tuner to set."""

    def __init__(self, lr: float = 1e-3, batch_size: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
        self.train_set, self.test_set = digits()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def train_dataloader(self) -> DataLoader:  # reads the batch size the Tuner sets
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def predict_step(self, batch, batch_idx):
        return self(batch[0]).argmax(dim=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


class ClassWriter(BasePredictionWriter):
    """Writes each batch's predicted classes, with the data set indices of its images."""

    def __init__(self, directory: str) -> None:
        super().__init__(write_interval="batch")
        self.directory = directory

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx,
                           dataloader_idx):
        torch.save({"classes": prediction, "indices": batch_indices},
                   os.path.join(self.directory, f"predictions-{batch_idx:03d}.pt"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join("tutorial_logs", "tuning"))
    parser.add_argument("--max-epochs", type=int, default=5)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    L.seed_everything(0)
    model = DigitClassifier()
    profiler = SimpleProfiler(dirpath=args.out, filename="profile")
    trainer = L.Trainer(accelerator="cpu", max_epochs=args.max_epochs, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, profiler=profiler)
    tuner = Tuner(trainer)

    finder = tuner.lr_find(model, min_lr=1e-5, max_lr=1.0, num_training=60)
    print(f"suggested learning rate: {model.hparams.lr:.4g}")
    if importlib.util.find_spec("matplotlib") is not None:
        finder.plot(suggest=True).savefig(os.path.join(args.out, "lr_find.png"))
        print(f"saved the loss curve to {os.path.join(args.out, 'lr_find.png')}")
    else:
        print("matplotlib is not installed: no plot of the search (pip install \"framework[matplotlib]\")")

    size = tuner.scale_batch_size(model, mode="power", init_val=8, max_trials=4)
    print(f"batch size: {size}")

    trainer.fit(model)
    print(f"profile of fit: {os.path.join(args.out, 'fit-profile.txt')}")

    predictions = os.path.join(args.out, "predictions")
    os.makedirs(predictions, exist_ok=True)
    writer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                       callbacks=[ClassWriter(predictions)])
    writer.predict(model, DataLoader(model.test_set, batch_size=64), return_predictions=False)
    written = [torch.load(os.path.join(predictions, name)) for name in sorted(os.listdir(predictions))]
    labels = torch.stack([model.test_set[i][1] for part in written for i in part["indices"]])
    classes = torch.cat([part["classes"] for part in written])
    print(f"wrote {len(written)} prediction files, {len(classes)} images: "
          f"accuracy {(classes == labels).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
