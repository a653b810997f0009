"""Step time and peak memory of one model in every precision mode, on the current device.

The model is a small transformer encoder (token embedding, 4 pre-norm blocks of width 256
with 4 heads and a 1024-wide MLP, a linear head over 1,000 tokens: 3.7 M parameters)
trained by the Trainer with AdamW on random token sequences (by default 8 sequences of 64
tokens per batch: on a CPU without bf16/fp16 instructions a half-precision step is some 50x
slower than fp32, and the default keeps the whole table within a few minutes there).

Each mode runs in a fresh process, so one mode's allocations cannot hide in another's peak:

- step time: the median time between consecutive ``on_train_batch_end`` calls, after
  ``--warmup`` steps;
- peak memory: on CUDA, ``torch.cuda.max_memory_allocated`` over the run (weights,
  gradients, optimizer state and activations); on CPU, the growth of the process's peak
  resident set size from just before ``fit`` to its end (the weights, created before, are
  not in it; gradients, optimizer state, activations and allocator slack are).

    python benchmarks/precision.py [--steps 12] [--warmup 3] [--batch 8] [--length 64] [--modes 32-true ...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import statistics
import subprocess
import sys
import time
import warnings

import torch
from torch import nn

import framework

MODES = ("32-true", "16-mixed", "bf16-mixed", "bf16-true", "16-true", "64-true")
VOCAB, WIDTH, HEADS, MLP, BLOCKS = 1000, 256, 4, 1024, 4


class TinyTransformer(framework.Module):
    """A next-token model: embedding, ``BLOCKS`` pre-norm encoder blocks, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(WIDTH, HEADS, MLP, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(BLOCKS)
        )
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def training_step(self, batch, batch_idx):
        tokens, targets = batch
        logits = self(tokens)
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB).float(), targets.reshape(-1))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


class StepClock(framework.Callback):
    """Records the time at the end of every training batch."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if module.device.type == "cuda":
            torch.cuda.synchronize()
        self.stamps.append(time.perf_counter())


def batches(steps: int, batch: int, length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    made = []
    for _ in range(steps):
        tokens = torch.randint(0, VOCAB, (batch, length + 1), generator=generator)
        made.append((tokens[:, :-1], tokens[:, 1:]))
    return made


def peak_rss_mib() -> float:
    """This process's peak resident set size so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(mode: str, steps: int, warmup: int, batch: int, length: int) -> dict:
    """Train ``steps`` steps in ``mode`` in this process; step time and peak memory."""
    warnings.filterwarnings("ignore")
    model = TinyTransformer()
    parameters = sum(p.numel() for p in model.parameters())
    clock = StepClock()
    trainer = framework.Trainer(
        precision=mode, max_steps=steps, callbacks=[clock], logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
    )
    data = batches(steps, batch, length)
    cuda = trainer.runtime.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    rss_before = peak_rss_mib()
    trainer.fit(model, data)
    if cuda:
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = peak_rss_mib() - rss_before
    stamps = clock.stamps[warmup:]
    gaps = [later - earlier for earlier, later in itertools.pairwise(stamps)]
    return {
        "mode": mode,
        "device": str(trainer.runtime.device),
        "parameters": parameters,
        "ms_per_step": statistics.median(gaps) * 1e3,
        "peak_mib": peak,
    }


def run_in_child(mode: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--child", mode]
    for name in ("steps", "warmup", "batch", "length", "threads"):
        if getattr(args, name) is not None:
            command += [f"--{name}", str(getattr(args, name))]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
        return {"mode": mode, "error": reason}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8, help="sequences per batch")
    parser.add_argument("--length", type=int, default=64, help="tokens per sequence")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(measure(args.child, args.steps, args.warmup, args.batch, args.length)))
        return

    rows = [run_in_child(mode, args) for mode in args.modes]
    measured = [row for row in rows if "error" not in row]
    base = next((row for row in measured if row["mode"] == "32-true"), None)
    first = measured[0] if measured else {}
    print(f"torch {torch.__version__}, device {first.get('device', '?')}, {first.get('parameters', 0) / 1e6:.1f} M "
          f"parameters, batch {args.batch} x {args.length} tokens, AdamW, "
          f"median of {args.steps - args.warmup - 1} steps")
    memory = "peak MiB" if first.get("device", "").startswith("cuda") else "peak +MiB"
    print(f"{'precision':<11} {'ms/step':>9} {'x 32-true':>10} {memory:>10}")
    for row in rows:
        if "error" in row:
            print(f"{row['mode']:<11} failed: {row['error']}")
            continue
        ratio = row["ms_per_step"] / base["ms_per_step"] if base else float("nan")
        print(f"{row['mode']:<11} {row['ms_per_step']:>9.1f} {ratio:>10.2f} {row['peak_mib']:>10.0f}")


if __name__ == "__main__":
    main()
