"""A training run for the crash test: ``python -m tests.trainer.crash_run DIRPATH RESULT``.

It resumes from ``DIRPATH``'s last checkpoint when there is one, saves every 3 steps, prints
``started`` when training starts and ``saving`` as each save begins (so the test can kill it
mid-save), and writes the final weights to ``RESULT``. A large buffer makes each save take a while.
"""

from __future__ import annotations

import sys
import time
import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import framework
from framework.callbacks import ModelCheckpoint


class Noisy(framework.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.3), nn.Linear(16, 1))
        self.register_buffer("ballast", torch.zeros(4_000_000))  # 16 MB: a save lasts long enough to be hit

    def training_step(self, batch, batch_idx):
        time.sleep(0.02)  # a step long enough for a kill to land inside training
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)]


class Announce(framework.Callback):
    def on_train_start(self, trainer, module):
        print("started", flush=True)

    def on_save_checkpoint(self, trainer, module, checkpoint):
        print("saving", flush=True)


def data() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(40, 4, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4, shuffle=True)


def main(dirpath: str, result: str) -> None:
    torch.set_num_threads(1)
    framework.seed_everything(0, verbose=False)
    checkpoint = ModelCheckpoint(dirpath=dirpath, every_n_train_steps=3, save_last=True)
    trainer = framework.Trainer(max_epochs=3, accelerator="cpu", logger=False, enable_progress_bar=False,
                                enable_model_summary=False, callbacks=[checkpoint, Announce()])
    model = Noisy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no last checkpoint yet" on the first run
        trainer.fit(model, data(), ckpt_path="last")
    torch.save({k: v for k, v in model.state_dict().items() if k != "ballast"}, result)


if __name__ == "__main__":
    main(*sys.argv[1:3])
