"""A small classifier and its data, shared by the precision tests."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import framework


def blobs(n: int = 256, seed: int = 0) -> TensorDataset:
    """Three Gaussian blobs in 8 dimensions, labelled 0, 1, 2."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 3
    centres = torch.randn(3, 8, generator=generator) * 2
    x = centres[labels] + torch.randn(n, 8, generator=generator)
    return TensorDataset(x, labels)


def blob_loader(n: int = 256, batch_size: int = 32) -> DataLoader:
    return DataLoader(blobs(n), batch_size=batch_size)


class Classifier(framework.Module):
    """8 -> 32 -> 3 MLP trained with SGD on cross-entropy; records what each step saw in ``self.seen``."""

    def __init__(self, lr: float = 0.1, batch_norm: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        layers = [nn.Linear(8, 32)] + ([nn.BatchNorm1d(32)] if batch_norm else []) + [nn.ReLU(), nn.Linear(32, 3)]
        self.net = nn.Sequential(*layers)
        self.lr = lr
        self.seen: list[dict] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def _step(self, batch) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = nn.functional.cross_entropy(logits, y)
        self.seen.append({
            "autocast": torch.is_autocast_enabled(x.device.type),
            "input_dtype": x.dtype,
            "label_dtype": y.dtype,
            "logits_dtype": logits.dtype,
            "loss_dtype": loss.dtype,
            "default_dtype": torch.get_default_dtype(),
            "new_tensor_dtype": torch.zeros(1).dtype,
        })
        return loss

    def training_step(self, batch, batch_idx):
        loss = self._step(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._step(batch))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self._step(batch))

    def predict_step(self, batch, batch_idx):
        self._step(batch)
        return self(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def fp32_loss(model: Classifier, data: TensorDataset) -> float:
    """Cross-entropy of ``model``'s weights, copied into an fp32 Classifier, over ``data``."""
    reference = Classifier(batch_norm=any(isinstance(m, nn.BatchNorm1d) for m in model.modules()))
    reference.load_state_dict({key: value.float() for key, value in model.state_dict().items()})
    reference.eval()
    with torch.no_grad():
        x, y = data.tensors
        return nn.functional.cross_entropy(reference(x), y).item()
