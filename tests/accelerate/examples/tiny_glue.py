"""Offline stand-ins for what Accelerate's GLUE examples take from the hub: a sentence-pair dataset, a word-level
tokenizer that pads batches, a small classifier whose output has ``.loss`` and ``.logits``, a linear warmup
schedule and an accuracy/F1 metric. Small enough that a run takes seconds on a CPU."""

from __future__ import annotations

import random
from types import SimpleNamespace

import torch

WORDS = ("the cat dog sat ran on mat log big small red blue quick slow bird fish tree house car road "
         "sun moon rain snow").split()


class BatchEncoding(dict):
    """A dict of tensors that moves to a device, as the tokenizer's batches do."""

    def to(self, device: torch.device) -> BatchEncoding:
        return BatchEncoding({key: value.to(device) for key, value in self.items()})


class Tokenizer:
    """Words to ids (0 pads, 1 separates the sentences); ``pad`` makes a batch of the longest length."""

    vocabulary = {word: index + 2 for index, word in enumerate(WORDS)}

    def __call__(self, first: str, second: str) -> dict[str, list[int]]:
        ids = [self.vocabulary[word] for word in first.split()] + [1] + [
            self.vocabulary[word] for word in second.split()]
        return {"input_ids": ids, "attention_mask": [1] * len(ids)}

    def pad(self, examples: list[dict], pad_to_multiple_of: int | None = None, max_length: int | None = None
            ) -> BatchEncoding:
        length = max_length or max(len(example["input_ids"]) for example in examples)
        if pad_to_multiple_of:
            length = -(-length // pad_to_multiple_of) * pad_to_multiple_of
        ids = [example["input_ids"] + [0] * (length - len(example["input_ids"])) for example in examples]
        mask = [example["attention_mask"] + [0] * (length - len(example["attention_mask"])) for example in examples]
        return BatchEncoding(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                             labels=torch.tensor([example["labels"] for example in examples]))


def sentence_pairs(count: int, seed: int) -> list[dict]:
    """Random pairs, labelled 1 when the first sentence starts with a word of the vocabulary's first half."""
    rng = random.Random(seed)
    tokenizer = Tokenizer()
    rows = []
    for _ in range(count):
        first = [rng.choice(WORDS) for _ in range(rng.randint(3, 7))]
        second = [rng.choice(WORDS) for _ in range(rng.randint(3, 7))]
        label = int(WORDS.index(first[0]) < len(WORDS) // 2)
        rows.append({**tokenizer(" ".join(first), " ".join(second)), "labels": label})
    return rows


class PairClassifier(torch.nn.Module):
    """Embeddings, a masked mean, a small MLP with dropout; returns ``.loss`` (with labels) and ``.logits``."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(len(WORDS) + 2, width)
        self.head = torch.nn.Sequential(torch.nn.Linear(2 * width, width), torch.nn.Tanh(), torch.nn.Dropout(0.1),
                                        torch.nn.Linear(width, 2))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor | None = None,
                **kwargs) -> SimpleNamespace:
        vectors = self.embed(input_ids) * attention_mask.unsqueeze(-1)
        mean = vectors.sum(1) / attention_mask.sum(1, keepdim=True)
        logits = self.head(torch.cat([mean, vectors[:, 0]], dim=-1))
        loss = torch.nn.functional.cross_entropy(logits.float(), labels) if labels is not None else None
        return SimpleNamespace(loss=loss, logits=logits)


def linear_schedule_with_warmup(optimizer: torch.optim.Optimizer, warmup: int, total: int
                                ) -> torch.optim.lr_scheduler.LambdaLR:
    """The learning rate rises over ``warmup`` steps, then falls linearly to 0 at ``total``."""
    def factor(step: int) -> float:
        return step / max(1, warmup) if step < warmup else max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class Accuracy:
    """``add_batch(predictions=, references=)`` then ``compute()``: accuracy and F1, as the GLUE metric gives."""

    def __init__(self) -> None:
        self.predictions: list[int] = []
        self.references: list[int] = []

    def add_batch(self, predictions: torch.Tensor, references: torch.Tensor) -> None:
        self.predictions += predictions.tolist()
        self.references += references.tolist()

    def compute(self) -> dict[str, float]:
        pairs = list(zip(self.predictions, self.references))
        true_positive = sum(1 for p, r in pairs if p == r == 1)
        predicted, actual = sum(self.predictions), sum(self.references)
        f1 = 2 * true_positive / (predicted + actual) if predicted + actual else 0.0
        result = {"accuracy": sum(p == r for p, r in pairs) / len(pairs), "f1": f1, "count": len(pairs)}
        self.predictions, self.references = [], []
        return result
