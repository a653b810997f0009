"""A small GPT split four ways: two data-parallel groups of two tensor-parallel ranks, on CPU.

Tensor parallelism splits each weight matrix of a layer over the ranks of a group, which then
compute one layer together: a "colwise" layer gives each rank some of the output features (the
query, key and value projections: some of the attention heads; the MLP's first layer: some of its
hidden units), and the "rowwise" layer after it takes those parts and sums the ranks' partial
outputs into the whole result. Data parallelism (here FSDP2, ZeRO-3) splits the batch over the
groups and shards what each group holds once more. On 2 x 2 ranks every rank holds a quarter of
the weights, gradients and AdamW state (the layer norms and the rowwise biases, which tensor
parallelism leaves whole, a half).

The Module says how its layers split, in ``configure_model``, from ``self.device_mesh``: a 2-D
mesh with the dimensions ``"data_parallel"`` and ``"tensor_parallel"``, made by
``ModelParallelStrategy``. Everything else is an ordinary training script. Run it from the
repository root:

    python tutorials/10_tensor_parallel.py                   # 4 ranks, 2 x 2, the Trainer starts them
    python tutorials/10_tensor_parallel.py --tensor-parallel 4 --data-parallel 1   # one group of 4
    python tutorials/10_tensor_parallel.py --sequence-parallel   # norms and residuals split by position

With ``--sequence-parallel`` the activations between the split layers are split along the
sequence too, over the ranks of a tensor-parallel group (each rank keeps half of the positions,
in a group of two, through the layer norms and the residual additions), which is what lets long sequences fit.

It prints the loss before and after training, computed on the whole model in this process: after
``fit`` the Trainer hands the trained weights back whole, so the same class runs unsplit here.
"""

from __future__ import annotations

import argparse
import math

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import framework as L
from framework.strategies import ModelParallelStrategy

TEXT = """\
Tensor parallel training splits every large matrix of a model over a few ranks, so that together they
hold one copy of it. Each rank multiplies its slice, and a single collective joins the partial results.
Data parallel training copies the model and splits the batch instead. The two combine on a mesh of ranks:
along one side the ranks share a model, along the other they share the data. Large models are trained
this way, on many machines, with the same code that runs here on four small processes.
"""
CHARACTERS = sorted(set(TEXT))


class Windows(Dataset):
    """Each window of ``length`` characters of ``TEXT``, with the window one character later as the target."""

    def __init__(self, length: int) -> None:
        self.ids = torch.tensor([CHARACTERS.index(character) for character in TEXT])
        self.length = length

    def __len__(self) -> int:
        return len(self.ids) - self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.ids[index:index + self.length + 1]
        return chunk[:-1], chunk[1:]


class Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.head_width = width // heads
        self.query, self.key, self.value = (nn.Linear(width, width) for _ in range(3))
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        # -1 heads: split colwise, a rank holds only its share of the heads
        q, k, v = (layer(x).view(batch, length, -1, self.head_width).transpose(1, 2)
                   for layer in (self.query, self.key, self.value))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(batch, length, -1))


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.attention_norm, self.attention = nn.LayerNorm(width), Attention(width, heads)
        self.mlp_norm = nn.LayerNorm(width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.down(nn.functional.gelu(self.up(self.mlp_norm(x))))


class GPT(L.Module):
    def __init__(self, vocabulary: int, context: int = 32, width: int = 64, depth: int = 2, heads: int = 4,
                 lr: float = 3e-3, sequence_parallel: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.token_embedding = nn.Embedding(vocabulary, width)
        self.position_embedding = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocabulary)

    def configure_model(self) -> None:
        """Split the layers over the mesh (the Trainer calls this on every rank before training)."""
        mesh = self.device_mesh
        if mesh is None or _is_split(self.head.weight):  # one process, or split already (it runs every fit)
            return
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import parallelize_module

        plan = tensor_parallel_plan(self.hparams.sequence_parallel)
        parallelize_module(self, mesh["tensor_parallel"], plan["model"])
        for block in self.blocks:
            parallelize_module(block, mesh["tensor_parallel"], plan["block"])
            fully_shard(block, mesh=mesh["data_parallel"])  # the strategy shards the rest around the blocks

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.token_embedding(ids) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def training_step(self, batch, batch_idx):
        ids, targets = batch
        loss = nn.functional.cross_entropy(self(ids).flatten(0, 1), targets.flatten())
        self.log("train_loss", loss, prog_bar=True, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.01)


def tensor_parallel_plan(sequence_parallel: bool = False) -> dict[str, dict[str, object]]:
    """How each layer splits over the tensor-parallel ranks: for the model's own layers and for each block.

    Colwise then rowwise: the query/key/value and MLP-up layers give each rank some of their
    outputs, the out and MLP-down layers take exactly those and sum the ranks' partial results.
    The embeddings split their tables (vocabulary, positions) and the head its outputs, gathered
    whole for the loss. With ``sequence_parallel``, the layer norms, and the activations between
    blocks, hold a share of the positions instead of all of them.
    """
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    between = Shard(1) if sequence_parallel else Replicate()  # how the residual stream is held between layers
    model = {
        "token_embedding": RowwiseParallel(input_layouts=Replicate(), output_layouts=between),
        # positions have no batch dimension: their sequence dimension is the first
        "position_embedding": RowwiseParallel(input_layouts=Replicate(),
                                              output_layouts=Shard(0) if sequence_parallel else Replicate()),
        "head": ColwiseParallel(input_layouts=between, output_layouts=Replicate()),
    }
    block: dict[str, object] = {
        "attention.query": ColwiseParallel(), "attention.key": ColwiseParallel(),
        "attention.value": ColwiseParallel(), "attention.out": RowwiseParallel(output_layouts=between),
        "up": ColwiseParallel(), "down": RowwiseParallel(output_layouts=between),
    }
    if sequence_parallel:
        model["norm"] = SequenceParallel()
        block.update({
            "attention_norm": SequenceParallel(), "mlp_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "up": ColwiseParallel(input_layouts=Shard(1)),
        })
    return {"model": model, "block": block}


def _is_split(tensor: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


@torch.no_grad()
def mean_loss(model: GPT, data: Windows) -> float:
    """The loss over every window, on the whole model in this process."""
    ids, targets = (torch.stack(column) for column in zip(*(data[i] for i in range(len(data))), strict=True))
    return nn.functional.cross_entropy(model(ids).flatten(0, 1), targets.flatten()).item()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensor-parallel", type=int, default=2, help="ranks per tensor-parallel group")
    parser.add_argument("--data-parallel", type=int, default=2, help="tensor-parallel groups")
    parser.add_argument("--sequence-parallel", action="store_true")
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=8, help="windows per data-parallel group and step")
    args = parser.parse_args()

    L.seed_everything(0)
    model = GPT(vocabulary=len(CHARACTERS), sequence_parallel=args.sequence_parallel)
    data = Windows(model.hparams.context)
    before = mean_loss(model, data)
    strategy = ModelParallelStrategy(data_parallel_size=args.data_parallel,
                                     tensor_parallel_size=args.tensor_parallel)
    trainer = L.Trainer(accelerator="cpu", devices=args.data_parallel * args.tensor_parallel, strategy=strategy,
                        max_steps=args.max_steps, logger=False, enable_checkpointing=False)
    trainer.fit(model, DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True))
    print(f"loss: {before:.3f} before training, {mean_loss(model, data):.3f} after "
          f"(guessing uniformly over {len(CHARACTERS)} characters: {math.log(len(CHARACTERS)):.3f})")


if __name__ == "__main__":
    main()
