"""Small models and data shared by the tests."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import framework
from framework.loggers import Logger


def regression_data(n: int = 64, features: int = 4, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=generator)
    y = x @ torch.arange(1.0, features + 1).unsqueeze(1) + 0.1 * torch.randn(n, 1, generator=generator)
    return TensorDataset(x, y)


def loader(n: int = 64, batch_size: int = 8, seed: int = 0, shuffle: bool = False) -> DataLoader:
    return DataLoader(regression_data(n, seed=seed), batch_size=batch_size, shuffle=shuffle)


class Regressor(framework.Module):
    """A linear regressor that logs ``train_loss`` per step and ``val_loss``/``test_loss`` per epoch."""

    def __init__(self, lr: float = 0.05, features: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(0)
        self.net = nn.Linear(features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss(self, batch) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.loss(batch))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self.loss(batch))

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        x = batch[0] if isinstance(batch, (list, tuple)) else batch
        return self(x)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class RecordingLogger(Logger):
    """Keeps every ``log_metrics`` call as ``(step, metrics)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, dict[str, float]]] = []
        self.hyperparams: list[dict] = []
        self.finalized: list[str] = []

    def log_metrics(self, metrics, step):
        self.calls.append((step, dict(metrics)))

    def log_hyperparams(self, params):
        self.hyperparams.append(dict(params))

    def finalize(self, status):
        self.finalized.append(status)

    def steps_with(self, key: str) -> list[int]:
        return [step for step, metrics in self.calls if key in metrics]


def quiet_trainer(**kwargs) -> framework.Trainer:
    """A CPU Trainer without logger, progress bar, checkpoints or summary, unless asked for."""
    settings = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False)
    settings.update(kwargs)
    return framework.Trainer(**settings)


class CountingBackend:
    """A torch.compile backend that runs graphs eagerly and counts how many it was given."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return graph_module.forward
