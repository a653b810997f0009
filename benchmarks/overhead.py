"""Per-step framework overhead on a tiny MLP, against a plain PyTorch loop.

32 -> 64 -> 4 MLP, batch 32, SGD, CPU, one thread, 3,000 steps per run; every variant
iterates the same pre-built list of batches, so data loading costs nothing and what is
left is the step plus the framework around it. "fw Accelerator" is the loop an Accelerate
user writes, run on ``framework.accelerate.Accelerator``. Each variant runs ``--runs`` times,
interleaved, and the median is reported. Lightning and Accelerate rows appear when they
are importable (run this file with an interpreter that has them and ``framework`` on
``PYTHONPATH``).

    python benchmarks/overhead.py [--steps 3000] [--runs 5]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from common import Batches, importable
from torch import nn

import framework

IN, HIDDEN, OUT, BATCH = 32, 64, 4, 32


def make_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))


def make_batches(steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, IN, generator=generator), torch.randint(0, OUT, (BATCH,), generator=generator))
            for _ in range(steps)]


# -- plain PyTorch -------------------------------------------------------------------------------------------
def plain(batches: list, log: bool) -> float:
    net = make_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    start = time.perf_counter()
    for x, y in batches:
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


# -- framework ---------------------------------------------------------------------------------------------------
class FrameworkMLP(framework.Module):
    def __init__(self, log: bool) -> None:
        super().__init__()
        self.net = make_net()
        self.log_every_step = log

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        if self.log_every_step:
            self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def with_framework(batches: list, log: bool) -> float:
    model = FrameworkMLP(log)
    trainer = framework.Trainer(
        accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    )
    start = time.perf_counter()
    trainer.fit(model, Batches(batches))
    elapsed = time.perf_counter() - start
    assert trainer.global_step == len(batches)
    return elapsed


# -- framework's Accelerator ---------------------------------------------------------------------------------------
def with_framework_accelerator(batches: list, log: bool) -> float:
    from framework.accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    return accelerate_style_loop(accelerator, batches, log)


def accelerate_style_loop(accelerator: Any, batches: list, log: bool) -> float:
    """The loop an Accelerate user writes, timed for ``accelerator`` (ours or Accelerate's)."""
    net = make_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    net, optimizer = accelerator.prepare(net, optimizer)
    start = time.perf_counter()
    for x, y in batches:
        loss = nn.functional.cross_entropy(net(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if log:
            accelerator.log({"train_loss": loss})
    return time.perf_counter() - start


# -- Lightning (optional) ------------------------------------------------------------------------------------------
def with_lightning(batches: list, log: bool) -> float:
    import lightning as L

    class LightningMLP(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = make_net()

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = nn.functional.cross_entropy(self.net(x), y)
            if log:
                self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    model = LightningMLP()
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    )
    start = time.perf_counter()
    trainer.fit(model, Batches(batches))
    return time.perf_counter() - start


# -- Accelerate (optional) --------------------------------------------------------------------------------------------
def with_accelerate(batches: list, log: bool) -> float:
    from accelerate import Accelerator

    return accelerate_style_loop(Accelerator(cpu=True), batches, log)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)

    Variant = tuple[str, Callable[[list, bool], float]]
    variants: list[Variant] = [("plain PyTorch", plain), ("framework", with_framework),
                               ("fw Accelerator", with_framework_accelerator)]
    if importable("lightning"):
        variants.append(("Lightning", with_lightning))
    if importable("accelerate"):
        variants.append(("Accelerate", with_accelerate))

    batches = make_batches(args.steps)
    rows = []
    for log in (False, True):
        times: dict[str, list[float]] = {name: [] for name, _ in variants}
        for _name, run in variants:  # warm-up
            run(batches[:200], log)
        for _ in range(args.runs):
            for name, run in variants:
                times[name].append(run(batches, log))
        base = statistics.median(times["plain PyTorch"])
        for name, _ in variants:
            median = statistics.median(times[name])
            rows.append((name, "every step" if log else "none", median / args.steps * 1e6, median / base))

    print(f"torch {torch.__version__}, 1 thread, {args.steps} steps, median of {args.runs} runs")
    print(f"{'loop':<15} {'self.log':<11} {'us/step':>9} {'x plain':>8}")
    for name, log, per_step, ratio in rows:
        print(f"{name:<15} {log:<11} {per_step:>9.1f} {ratio:>8.2f}")


if __name__ == "__main__":
    main()
