"""A small GPT trained with ZeRO-3 on two CPU processes, then asked to continue a sentence.

A character-level GPT (token and position embeddings, a stack of transformer blocks with
causal self-attention, a final LayerNorm and a linear head) learns to predict the next
character of a few paragraphs written into this file, so nothing is downloaded. It trains on
two ranks with ``strategy="zero3"`` and ``precision="bf16-mixed"``; run it from the repository
root:

    python tutorials/07_gpt_zero3.py                      # two ranks, the Trainer starts them
    python tutorials/07_gpt_zero3.py --max-steps 300      # longer: it learns these pages by heart

It prints the loss on a paragraph it never trained on, before and after training, and a few
characters the trained model writes greedily after a prompt. With 300 steps the text it writes
reads like the training paragraphs, and the held-out loss rises again: the corpus is too
small to learn more than its own sentences.

Why ZeRO-3: plain DDP keeps the whole model, its gradients and AdamW's two moments on every
rank, 16 bytes per parameter. ZeRO-3 gives each of N ranks 1/N of all three and gathers a
block's full weights only while that block computes, so a rank holds about 16/N bytes per
parameter plus one block; models N times larger fit in the same memory, for more
communication. Here the model is tiny; the script shows the shape of the code, which stays
the same for a model that needs it.

bf16-mixed keeps the sharded weights, gradients and optimizer state in fp32 and runs the
matrix multiplies in bfloat16. That is what one wants on a GPU; on a CPU without bfloat16
instructions it is slower than fp32 (``benchmarks/README.md``), which this small model hides.

The script uses the whole trained model in this process after ``fit``, which holds when the
Trainer starts its ranks itself; under ``framework launch`` or torchrun every process is a
rank, and its model stays sharded after ``fit``.
"""

from __future__ import annotations

import argparse
import math

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import framework as L

CORPUS = """\
The lighthouse keeper climbed the stairs every evening before the sun went down. There were one hundred
and twelve steps, and he counted each of them, because counting kept his mind from the wind. At the top he
cleaned the glass, trimmed the wick and lit the lamp, and then he sat by the window and watched the ships
come home.

In the morning the sea was grey and quiet. The keeper walked along the shore to the village, where the
baker gave him bread and the fishermen told him which boats had come in late. He wrote their names in a
small book, and when every boat of the evening was in the book, he slept well.

One winter a storm came from the north and did not stop for three days. The keeper kept the lamp burning
through the nights and the days, and he did not sleep at all. On the fourth morning the wind fell, the
clouds opened, and a small boat came slowly into the harbour with its sail torn. The fishermen ran down
to the water to help, and the keeper wrote the name of the boat in his book.

Years later a machine took the place of the keeper. It lit the lamp when the light went down and turned
it off when the sun came up, and it never counted the steps. The keeper still walked to the village in
the morning, and the baker still gave him bread, and the fishermen still told him which boats had come in.
"""

# The last paragraph is held out: the loss on it says whether the model learned the language, not the page.
TRAIN_TEXT, HELD_OUT_TEXT = CORPUS.rsplit("\n\n", 1)
CHARACTERS = sorted(set(CORPUS))
ENCODE = {character: index for index, character in enumerate(CHARACTERS)}


def encode(text: str) -> torch.Tensor:
    return torch.tensor([ENCODE[character] for character in text])


def decode(ids: torch.Tensor) -> str:
    return "".join(CHARACTERS[index] for index in ids.tolist())


class Windows(Dataset):
    """Every window of ``length`` characters in ``text``, with the same window one character later as target."""

    def __init__(self, text: str, length: int) -> None:
        self.ids, self.length = encode(text), length

    def __len__(self) -> int:
        return len(self.ids) - self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.ids[index:index + self.length + 1]
        return chunk[:-1], chunk[1:]


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    """Pre-norm transformer block: attention, then an MLP, each added to the residual stream."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(width)
        self.attention = CausalSelfAttention(width, heads)
        self.mlp_norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class GPT(L.Module):
    def __init__(self, vocabulary: int, context: int = 32, width: int = 64, depth: int = 2, heads: int = 4,
                 lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.token_embedding = nn.Embedding(vocabulary, width)
        self.position_embedding = nn.Embedding(context, width)
        # A ModuleList of blocks is what the zero3 strategy's default policy looks for: each block
        # becomes a unit of its own, whose weights are gathered just before it runs and split again
        # right after, so at most one block is whole at a time. The embeddings, the final norm and
        # the head are small; they share the outermost unit.
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocabulary)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.token_embedding(ids) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self(ids)
        return nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    def training_step(self, batch, batch_idx):
        loss = self.loss(*batch)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.01)

    @torch.no_grad()
    def generate(self, prompt: str, characters: int) -> str:
        """``prompt`` continued by the most likely next character, ``characters`` times."""
        ids = encode(prompt)[None]
        for _ in range(characters):
            logits = self(ids[:, -self.hparams.context:])
            ids = torch.cat([ids, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
        return decode(ids[0])


@torch.no_grad()
def held_out_loss(model: GPT) -> float:
    """Mean loss over every window of the held-out paragraph (in this process, on the whole model)."""
    # one row per window, plus its target
    windows = encode(HELD_OUT_TEXT).unfold(0, model.hparams.context + 1, 1)
    model.eval()
    loss = model.loss(windows[:, :-1], windows[:, 1:]).item()
    model.train()
    return loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=16, help="windows per rank and step")
    parser.add_argument("--prompt", default="The keeper ")
    args = parser.parse_args()

    L.seed_everything(0)
    model = GPT(vocabulary=len(CHARACTERS))
    before = held_out_loss(model)
    loader = DataLoader(Windows(TRAIN_TEXT, model.hparams.context), batch_size=args.batch_size, shuffle=True,
                        drop_last=True)
    # Each rank trains on its share of the windows; the Trainer starts the two ranks itself and, when they
    # are done, puts the trained weights back, whole, into `model` in this process.
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="zero3", precision="bf16-mixed",
                        max_steps=args.max_steps, logger=False, enable_checkpointing=False)
    trainer.fit(model, loader)

    print(f"train loss (last step): {trainer.callback_metrics['train_loss'].item():.3f}")
    print(f"held-out loss: {before:.3f} before training, {held_out_loss(model):.3f} after "
          f"(guessing uniformly over {len(CHARACTERS)} characters: {math.log(len(CHARACTERS)):.3f})")
    print(f"generated: {model.generate(args.prompt, 60)!r}")


if __name__ == "__main__":
    main()
