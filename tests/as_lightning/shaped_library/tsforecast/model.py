"""The library's model: a LightningModule that records its constructor's arguments with ``get_init_args``."""

import inspect

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.parsing import AttributeDict, get_init_args
from pytorch_lightning.utilities.types import STEP_OUTPUT
from torch import nn
from torch.utils.data import Dataset

try:  # imported for a branch most users never take; the library must still import without it
    from pytorch_lightning.strategies import DeepSpeedStrategy
except ImportError:
    DeepSpeedStrategy = None


class SeasonalData(Dataset):
    """Windows of a noisy sine wave: ``length`` past values, then the next one."""

    def __init__(self, samples: int = 64, length: int = 8, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        time = torch.arange(samples + length, dtype=torch.float32)
        series = torch.sin(time / 3) + 0.05 * torch.randn(samples + length, generator=generator)
        self.windows = torch.stack([series[i:i + length] for i in range(samples)])
        self.targets = torch.stack([series[i + length] for i in range(samples)]).unsqueeze(1)

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int):
        return self.windows[index], self.targets[index]


class Forecaster(pl.LightningModule):
    """A small MLP forecaster; ``self.init_args`` is what it was built with, as the library's export reads it."""

    def __init__(self, length: int = 8, hidden: int = 16, learning_rate: float = 0.05, **extra) -> None:
        super().__init__()
        self.init_args = AttributeDict(get_init_args(inspect.currentframe()))
        self.save_hyperparameters()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(length, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx) -> STEP_OUTPUT:
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx) -> STEP_OUTPUT:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y), sync_dist=True)

    def configure_optimizers(self):
        if DeepSpeedStrategy is not None and isinstance(self.trainer.strategy, DeepSpeedStrategy):
            raise RuntimeError("the DeepSpeed branch is not taken in these runs")
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)
