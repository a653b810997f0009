"""Your own loop, written the Hugging Face Accelerate way, run by the framework.

A small MLP learns scikit-learn's 8x8 handwritten digits. Every line is what an Accelerate user
writes; only the imports changed (``from accelerate import Accelerator`` became
``from framework.accelerate import Accelerator``). It shows gradient accumulation, clipping,
``gather_for_metrics`` (each validation image counted once, whatever the number of processes),
and ``save_state``/``load_state``: a run cut off part-way and resumed ends with exactly the
weights of a run that never stopped.

    framework launch --num_processes 2 --cpu tutorials/09_accelerate_loop.py     # two CPU processes
    torchrun --nproc-per-node 2 tutorials/09_accelerate_loop.py                   # the same, by torchrun
    python tutorials/09_accelerate_loop.py                                        # one process
    framework launch --num_processes 2 --cpu tutorials/09_accelerate_loop.py --stop-after 25   # cut off
    framework launch --num_processes 2 --cpu tutorials/09_accelerate_loop.py --resume          # and resumed
"""

from __future__ import annotations

import argparse
import os
import shutil

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from framework.accelerate import Accelerator  # was: from accelerate import Accelerator
from framework.accelerate.utils import ProjectConfiguration, set_seed  # was: from accelerate.utils import ...


class Progress:
    """Where the loop is; save_state keeps it (register_for_checkpointing), so a resumed run knows."""

    def __init__(self) -> None:
        self.epoch = 0
        self.batches_done = 0  # in this epoch

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "batches_done": self.batches_done}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.batches_done = state["epoch"], state["batches_done"]


def digits() -> tuple[TensorDataset, TensorDataset]:
    images, labels = load_digits(return_X_y=True)
    images = torch.tensor(images, dtype=torch.float32) / 16.0
    labels = torch.tensor(labels)
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
    train, val = order[:1437], order[1437:]
    return TensorDataset(images[train], labels[train]), TensorDataset(images[val], labels[val])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--stop-after", type=int, default=0,
                        help="save the state after this many batches and stop")
    parser.add_argument("--resume", action="store_true", help="go on from the newest saved state")
    parser.add_argument("--project-dir", default="tutorial_logs/accelerate")
    args = parser.parse_args()

    config = ProjectConfiguration(project_dir=args.project_dir, automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(gradient_accumulation_steps=2, mixed_precision="bf16", project_config=config)
    if not args.resume and accelerator.is_main_process:  # a fresh run numbers its saved states from 0 again
        shutil.rmtree(os.path.join(args.project_dir, "checkpoints"), ignore_errors=True)
    accelerator.wait_for_everyone()
    set_seed(0)

    train_set, val_set = digits()
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=64)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    # Counted in batches of one process, as Accelerate users write it: the prepared scheduler steps once per
    # process for each optimizer step, so the schedule ends with the training whatever the number of processes.
    total_steps = len(train_loader) * args.epochs // accelerator.gradient_accumulation_steps + 1
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=total_steps)
    model, optimizer, train_loader, val_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, val_loader, scheduler)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    if args.resume:
        accelerator.load_state()  # the newest complete state in <project-dir>/checkpoints
        accelerator.print(f"resumed in epoch {progress.epoch} after {progress.batches_done} batches")

    steps = 0
    while progress.epoch < args.epochs:
        model.train()
        skipped = progress.batches_done
        batches = accelerator.skip_first_batches(train_loader, skipped) if skipped else train_loader
        for images, labels in batches:
            with accelerator.accumulate(model):
                loss = nn.functional.cross_entropy(model(images), labels)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            progress.batches_done += 1
            steps += 1
            if steps == args.stop_after:
                folder = accelerator.save_state()
                accelerator.print(f"stopped after {steps} batches, state saved in {folder}")
                return
        progress.epoch, progress.batches_done = progress.epoch + 1, 0

        model.eval()
        predictions, references = [], []
        for images, labels in val_loader:
            with torch.no_grad():
                guess = model(images).argmax(dim=-1)
            guess, labels = accelerator.gather_for_metrics((guess, labels))
            predictions.append(guess)
            references.append(labels)
        predictions, references = torch.cat(predictions), torch.cat(references)
        accuracy = (predictions == references).float().mean().item()
        accelerator.print(f"epoch {progress.epoch - 1}: validation accuracy {accuracy:.3f} over "
                          f"{len(references)} images")

    weights = accelerator.get_state_dict(model)
    checksum = sum(value.double().abs().sum().item() for value in weights.values())
    accelerator.print(f"weights checksum: {checksum:.6f}")
    accelerator.save_model(model, f"{args.project_dir}/model")
    accelerator.end_training()


if __name__ == "__main__":
    main()
