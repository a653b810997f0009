"""The small model of the DDP tests and its plain PyTorch reference, kept apart from test_ddp.py so that the scripts
launched ranks run (launched_run.py, multi_node_run.py) import only torch and the framework: test_ddp.py imports
torchmetrics, which brings scipy in, about a second of CPU in every rank."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

import framework

FEATURES = 4


class Regressor(framework.Module):
    """A small MLP trained with SGD + momentum, so any difference in gradients shows in the weights."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.lr = lr
        self.net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def regression_data(count: int = 64, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, FEATURES, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True).sin())


def quiet_trainer(**kwargs) -> framework.Trainer:
    settings = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False)
    return framework.Trainer(**{**settings, **kwargs})


def plain_pytorch_weights(model: Regressor, data: TensorDataset, batch_size: int, epochs: int,
                          accumulate: int = 1) -> dict[str, torch.Tensor]:
    optimizer = torch.optim.SGD(model.parameters(), lr=model.lr, momentum=0.9)
    for _ in range(epochs):
        for index, (x, y) in enumerate(DataLoader(data, batch_size=batch_size)):
            (torch.nn.functional.mse_loss(model.net(x), y) / accumulate).backward()
            if (index + 1) % accumulate == 0:
                optimizer.step()
                optimizer.zero_grad()
    return model.state_dict()
