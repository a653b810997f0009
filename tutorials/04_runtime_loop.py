"""Keep your own training loop: a Hugging Face Accelerate script ported to ``framework.Runtime``.

A small text classifier (bag of word embeddings) learns whether a short review is positive or
negative. The loop is the one people write with Accelerate; each Runtime line replaces one
Accelerate line, and ``tutorials/README.md`` sets them side by side.

    python tutorials/04_runtime_loop.py                      # one process
    python tutorials/04_runtime_loop.py --devices 2          # two processes on this machine
    framework launch --nproc-per-node 2 tutorials/04_runtime_loop.py --devices 2   # the same, by torchrun

It prints the validation accuracy after each epoch.
"""

from __future__ import annotations

import argparse
import random

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from framework import Runtime

POSITIVE = ["great", "wonderful", "loved", "excellent", "enjoyable", "brilliant", "superb", "fun"]
NEGATIVE = ["awful", "boring", "hated", "terrible", "dull", "poor", "messy", "weak"]
NEUTRAL = ["the", "film", "plot", "actors", "was", "and", "story", "music", "a", "really", "quite", "ending"]


class Reviews(Dataset):
    """Short generated reviews: neutral words, two of the review's sentiment, sometimes one of the other."""

    def __init__(self, count: int, seed: int) -> None:
        rng = random.Random(seed)
        self.items = []
        for _ in range(count):
            label = rng.randrange(2)
            words = rng.choices(NEUTRAL, k=rng.randint(4, 9))
            words += rng.choices(POSITIVE if label else NEGATIVE, k=2)
            words += rng.choices(NEGATIVE if label else POSITIVE, k=rng.randint(0, 1))  # a mixed review
            rng.shuffle(words)
            self.items.append((" ".join(words), label))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[str, int]:
        return self.items[index]


VOCABULARY = {word: index for index, word in enumerate(["<pad>", *POSITIVE, *NEGATIVE, *NEUTRAL])}


def collate(batch: list[tuple[str, int]]) -> dict[str, torch.Tensor]:
    """Word ids padded to the longest review of the batch, and the labels."""
    ids = [torch.tensor([VOCABULARY[word] for word in text.split()]) for text, _ in batch]
    return {"input_ids": nn.utils.rnn.pad_sequence(ids, batch_first=True),
            "labels": torch.tensor([label for _, label in batch])}


class BagOfWords(nn.Module):
    def __init__(self, vocabulary_size: int, width: int = 32) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(vocabulary_size, width, mode="mean", padding_idx=0)
        self.classify = nn.Linear(width, 2)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.classify(self.embed(input_ids))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--accumulate", type=int, default=2)
    args = parser.parse_args()

    runtime = Runtime(accelerator="cpu", devices=args.devices, precision="bf16-mixed")
    runtime.launch()
    runtime.seed_everything(0)

    model = BagOfWords(len(VOCABULARY))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    train_loader = DataLoader(Reviews(2000, seed=1), batch_size=32, shuffle=True, collate_fn=collate)
    val_loader = DataLoader(Reviews(500, seed=2), batch_size=64, collate_fn=collate)
    model, optimizer = runtime.setup(model, optimizer)
    train_loader = runtime.setup_dataloaders(train_loader)
    val_loader = runtime.setup_dataloaders(val_loader, even_batches=False)  # each review on one rank only
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)

    for epoch in range(args.epochs):
        model.train()
        for index, batch in enumerate(train_loader):
            stepping = (index + 1) % args.accumulate == 0 or index + 1 == len(train_loader)
            with runtime.no_backward_sync(model, enabled=not stepping):
                loss = nn.functional.cross_entropy(model(batch["input_ids"]), batch["labels"])
                runtime.backward(loss / args.accumulate)
            if stepping:
                runtime.clip_gradients(model, optimizer, max_norm=1.0)
                optimizer.step()
                optimizer.zero_grad()
        scheduler.step()

        model.eval()
        correct = seen = torch.zeros((), device=runtime.device)
        with torch.no_grad():
            for batch in val_loader:
                predictions = model(batch["input_ids"]).argmax(dim=-1)
                correct = correct + (predictions == batch["labels"]).sum()
                seen = seen + len(predictions)
        correct, seen = runtime.all_reduce((correct, seen), reduce_op="sum")
        mean_loss = runtime.all_reduce(loss.detach(), reduce_op="mean")
        runtime.print(f"epoch {epoch}: train loss {mean_loss.item():.3f}, "
                      f"validation accuracy {(correct / seen).item():.3f} over {int(seen.item())} reviews")


if __name__ == "__main__":
    main()
