"""A loop that saves its state part-way and one that resumes from it, written as Accelerate users write them; the
resumed run must end with the uninterrupted run's weights."""

from __future__ import annotations

import os

import torch
from torch.utils.data import DataLoader, default_collate

from framework.accelerate import Accelerator
from tests.accelerate.loops import data, model_and_optimizer

EPOCHS, STOP_EPOCH, STOP_BATCH = 2, 0, 3


class Progress:
    """The epoch the loop is in, kept by save_state through register_for_checkpointing."""

    def __init__(self) -> None:
        self.epoch = 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch}

    def load_state_dict(self, state: dict) -> None:
        self.epoch = state["epoch"]


def masking_collate(samples: list) -> tuple[torch.Tensor, torch.Tensor]:
    """Default collation, then a random mask over the inputs drawn from torch's generator (as masking collators
    do): a resumed run must draw the same masks."""
    x, y = default_collate(samples)
    return x * (torch.rand(x.shape) > 0.2), y


def train(folder: str, stop: bool = False, resume: str | None = None, masks: bool = False, **options) -> dict:
    """Train EPOCHS epochs; ``stop``: save after batch STOP_BATCH of epoch STOP_EPOCH and return there; ``resume``:
    "position" (the loader continues by itself) or "skip" (skip_first_batches, as Accelerate's examples do);
    ``masks``: the loader's collate function draws random masks."""
    model, optimizer = model_and_optimizer(seed=1 if resume else 0)  # a resumed run must not rely on its seed
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2, **options)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    loader = DataLoader(data(40), batch_size=4, shuffle=True, collate_fn=masking_collate if masks else None)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    skip = 0
    if resume:
        torch.manual_seed(1234)
        accelerator.load_state(folder)
        skip = (STOP_BATCH + 1) if resume == "skip" else 0
    while progress.epoch < EPOCHS:
        active = accelerator.skip_first_batches(loader, skip) if skip else loader
        skip = 0
        for index, (x, y) in enumerate(active):
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if stop and progress.epoch == STOP_EPOCH and index == STOP_BATCH:
                accelerator.save_state(folder)
                return {"saved": sorted(os.listdir(folder))}
        progress.epoch += 1
    state = accelerator.get_state_dict(model)
    return {"weights": {name: value.clone() for name, value in state.items()}, "lr": scheduler.get_last_lr()}


def train_on_rank(rank: int, folder: str, stop: bool, resume: str | None, masks: bool = False) -> dict:
    return train(folder, stop=stop, resume=resume, masks=masks)
