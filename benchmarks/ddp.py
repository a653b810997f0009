"""DDP on CPU: time from ``fit()`` to the first optimizer step, and the steady-state step time, 1 and 2 ranks.

Rows:

- framework: ``Trainer(accelerator="cpu", devices=N)`` in a script; with N=2 the Trainer starts
  its ranks itself, by each start method in turn: ``fork`` (what ``"auto"`` does on a machine
  without GPUs), ``popen`` (the script run again: what ``"auto"`` does from a script on a GPU
  machine), ``forkserver`` (from pytest or a notebook there; the first fit in a process starts the
  server, later ones fork from it) and ``spawn``.
- Lightning (when ``lightning`` is importable: run with an interpreter that has it and
  ``framework`` on PYTHONPATH): ``lightning.Trainer(accelerator="cpu", devices=N, strategy="ddp")``,
  which starts its other ranks by running the script again.
- framework with a sharding strategy on 2 ranks, started as ``"auto"`` starts them (``fork`` on a
  machine without GPUs): ``strategy="zero2"`` and ``"zero3"`` (FSDP2), and DeepSpeed's own engine,
  ``"deepspeed_stage_2"`` and ``"deepspeed_stage_3"`` (only where DeepSpeed is installed: without it
  those names would run FSDP2 instead, so the rows are skipped and the table says so). On this small
  MLP the step time is their per-step overhead over DDP (gathering, reduce-scattering, and for
  DeepSpeed its engine's bookkeeping); their first step includes importing DeepSpeed in each rank and
  building its engine.
- plain DDP: a hand-written ``torch.nn.parallel.DistributedDataParallel`` loop (the same model,
  data and optimizer) started by ``torchrun``; its launch time is torchrun's, so it is not shown.

Launch-to-first-step is measured from just before ``fit()`` to the end of the first optimizer
step on rank 0 (one system-wide monotonic clock), with ``torch._dynamo`` imported beforehand in
both (Lightning imports it with itself; torch imports it in the first optimizer's constructor).
The step time is rank 0's mean over the steps after ``--warmup``. Each configuration runs in
its own process, ``--runs`` times in turn; medians are reported.

    python benchmarks/ddp.py [--runs 3] [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import framework
import framework.callbacks
import framework.strategies
from framework.strategies.deepspeed import EXTRA_HINT, deepspeed_available

WIDTH, BATCH = 256, 64
HERE = Path(__file__).resolve()


def make_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 1))


def make_data(steps: int, ranks: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    count = steps * BATCH * ranks
    return TensorDataset(torch.randn(count, WIDTH, generator=generator), torch.randn(count, 1, generator=generator))


class Steps:
    """The model's steps, shared by the framework's Module and Lightning's LightningModule."""

    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


class StepClock:
    """Records when each training batch ended and writes the times to ``out`` at the end (rank 0), through
    whichever callback base the trainer wants."""

    def __init__(self, out: str) -> None:
        super().__init__()
        self.out = out
        self.ends: list[float] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.ends.append(time.monotonic())

    def on_train_end(self, trainer, module):
        if trainer.global_rank == 0:
            Path(self.out).write_text(json.dumps({"ends": self.ends}))


# At the top level, so that ranks started by spawn or a forkserver can import them.
class FrameworkModel(Steps, framework.Module):
    pass


class FrameworkClock(StepClock, framework.callbacks.Callback):
    pass


def run_trainer(kind: str, devices: int, steps: int, out: str, start_method: str, fits: int,
                strategy_name: str = "ddp") -> None:
    if kind == "framework":
        library, Model, Clock = framework, FrameworkModel, FrameworkClock
    else:
        import lightning as library
        from lightning.pytorch.callbacks import Callback

        class Model(Steps, library.LightningModule):
            pass

        class Clock(StepClock, Callback):
            pass

    # The first optimizer made in a process imports torch._dynamo (1.5-2 s on this CPU). Lightning imports it
    # with itself, the framework when it is first needed: imported here for both, so the clock below
    # measures launching and set-up, not that import.
    import torch._dynamo  # noqa: F401

    strategy = "ddp" if devices > 1 else "auto"
    if kind == "framework" and devices > 1:
        strategy = (framework.strategies.DDPStrategy(start_method=start_method) if strategy_name == "ddp"
                    else strategy_name)  # the sharding strategies start their ranks as "auto" does
    for _ in range(fits):  # the last fit is measured
        clock = Clock(out)
        trainer = library.Trainer(accelerator="cpu", devices=devices, strategy=strategy, max_steps=steps,
                                  logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                  enable_model_summary=False, callbacks=[clock])
        model = Model()
        loader = DataLoader(make_data(steps, devices), batch_size=BATCH)
        started = time.monotonic()
        trainer.fit(model, loader)
    if trainer.global_rank == 0:
        record = json.loads(Path(out).read_text())
        record["started"] = started
        Path(out).write_text(json.dumps(record))


def run_plain(steps: int, out: str) -> None:
    """The reference: what people write by hand, run under torchrun."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DistributedSampler

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    model = DistributedDataParallel(make_net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = make_data(steps, world_size)
    loader = DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data, shuffle=False))
    ends = []
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        ends.append(time.monotonic())
    if rank == 0:
        Path(out).write_text(json.dumps({"ends": ends, "started": None}))
    dist.barrier()
    dist.destroy_process_group()


# (kind, devices, start method, fits in the process, strategy): each a row; the last fit of each run is measured.
CONFIGS = [("framework", 1, "auto", 1, "ddp"), ("lightning", 1, "auto", 1, "ddp"), ("plain", 1, "auto", 1, "ddp"),
           ("framework", 2, "fork", 1, "ddp"), ("framework", 2, "popen", 1, "ddp"),
           ("framework", 2, "forkserver", 1, "ddp"), ("framework", 2, "forkserver", 2, "ddp"),
           ("framework", 2, "spawn", 1, "ddp"), ("framework", 2, "auto", 1, "zero2"),
           ("framework", 2, "auto", 1, "deepspeed_stage_2"), ("framework", 2, "auto", 1, "zero3"),
           ("framework", 2, "auto", 1, "deepspeed_stage_3"), ("lightning", 2, "auto", 1, "ddp"),
           ("plain", 2, "auto", 1, "ddp")]
DEEPSPEED = ("deepspeed_stage_2", "deepspeed_stage_3")


def configs_to_run() -> tuple[list[tuple], list[str]]:
    """The rows this machine can run, and a line for each kind of row left out, saying why."""
    configs, skipped = CONFIGS, []
    try:
        import lightning  # noqa: F401
    except ImportError:
        configs = [config for config in configs if config[0] != "lightning"]
    if not deepspeed_available():
        configs = [config for config in configs if config[4] not in DEEPSPEED]
        skipped.append(f"{', '.join(DEEPSPEED)}: DeepSpeed is not installed ({EXTRA_HINT})")
    return configs, skipped


def measure(kind: str, devices: int, start_method: str, fits: int, strategy: str, steps: int,
            warmup: int) -> tuple[float | None, float]:
    """(launch-to-first-step seconds or None, mean step milliseconds) of one run in a fresh process."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "times.json")
        script = [str(HERE), "--one", kind, "--devices", str(devices), "--steps", str(steps), "--out", out,
                  "--start-method", start_method, "--fits", str(fits), "--strategy", strategy]
        if kind == "plain":
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                       str(devices), *script]
        else:
            command = [sys.executable, *script]
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]),
                                                                    os.environ.get("PYTHONPATH", "")])}
        if kind == "plain" and "OMP_NUM_THREADS" not in os.environ:
            # the thread share the framework's ranks take (torchrun alone would give each rank 1 thread)
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
            environment["OMP_NUM_THREADS"] = str(max(1, cores // devices))
        subprocess.run(command, check=True, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        record = json.loads(Path(out).read_text())
    ends = record["ends"]
    first = ends[0] - record["started"] if record["started"] is not None else None
    step_ms = (ends[-1] - ends[warmup]) / (len(ends) - 1 - warmup) * 1000
    return first, step_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--one", choices=("framework", "lightning", "plain"), help=argparse.SUPPRESS)
    parser.add_argument("--devices", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--start-method", default="auto", help=argparse.SUPPRESS)
    parser.add_argument("--fits", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--strategy", default="ddp", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one == "plain":
        return run_plain(args.steps, args.out)
    if args.one is not None:
        return run_trainer(args.one, args.devices, args.steps, args.out, args.start_method, args.fits,
                           args.strategy)

    configs, skipped = configs_to_run()
    results: dict[tuple, list[tuple[float | None, float]]] = {config: [] for config in configs}
    for _ in range(args.runs):
        for config in configs:
            results[config].append(measure(*config, args.steps, args.warmup))

    print(f"torch {torch.__version__}, {args.steps} steps of batch {BATCH} per rank, MLP {WIDTH}x{WIDTH}x{WIDTH}, "
          f"median of {args.runs} runs")
    print(f"| ranks | {'run':<30} | fit() to first step (s) | step time per rank (ms) | vs plain DDP |")
    print(f"|------:|:{'-' * 30}-|------------------------:|------------------------:|-------------:|")
    for config in configs:
        devices = config[1]
        runs = results[config]
        firsts = [first for first, _ in runs if first is not None]
        step = statistics.median(step for _, step in runs)
        plain = statistics.median(step for _, step in results[("plain", devices, "auto", 1, "ddp")])
        first_text = f"{statistics.median(firsts):.2f}" if firsts else "—"
        print(f"| {devices} | {_row_name(config):<30} | {first_text:>23} | {step:>23.3f} | {step / plain:>11.2f}x |")
    for line in skipped:
        print(f"Skipped: {line}.")


def _row_name(config: tuple) -> str:
    kind, devices, start_method, fits, strategy = config
    if kind == "plain":
        return "plain DDP (torchrun)"
    if kind == "lightning":
        return "Lightning"
    if devices == 1:
        return "framework"
    if strategy != "ddp":
        return f"framework, {strategy}"
    return f"framework, {start_method}" + (f", fit no. {fits}" if fits > 1 else "")


if __name__ == "__main__":
    main()
