"""ZeRO on CPU: the training state and activations each rank holds, and the step time, for ddp, zero1, zero2,
zero3, zero3 with activation checkpointing, zero3_offload, and DeepSpeed's own ZeRO stages 2 and 3.

The model is a stack of 6 feed-forward blocks (``Block``: Linear from width w to 4w, GELU, Linear
back to w; 12 linear layers) whose width is picked to give ``--params`` million parameters, trained
with fp32 AdamW on random data, on 2 ranks (gloo). Each strategy runs in its own pair of processes
(``framework.testing.spawn``), with the Trainer inside them joining those ranks.

Per rank, the bytes of state (``framework.testing.state_bytes``: a sharded tensor counts its
local part) are read on the first batch where ZeRO's arithmetic speaks of them: parameters
after the forward pass (``on_before_backward``), gradients after backward (``on_after_backward``),
optimizer state after the step (``on_train_batch_end``; the Trainer zeroes gradients before the next
backward, as Lightning does). The largest rank's value is shown beside the theory for Ψ parameters
on N ranks:

    ddp                4Ψ     4Ψ     8Ψ
    zero1              4Ψ     4Ψ     8Ψ/N
    zero2              4Ψ     4Ψ/N   8Ψ/N    (parameters gathered from forward to backward)
    zero3              4Ψ/N   4Ψ/N   8Ψ/N
    zero3_offload      as zero3, kept in CPU memory (on a CPU-only machine that is where everything is)
    deepspeed_stage_2  4Ψ     4Ψ/N   12Ψ/N   (optimizer: an fp32 master partition beside AdamW's moments)
    deepspeed_stage_3  4Ψ/N   4Ψ/N   12Ψ/N

The DeepSpeed rows (``Trainer(strategy="deepspeed_stage_2" / "deepspeed_stage_3")``, DeepSpeed's defaults
as Lightning sets them; run only where DeepSpeed is installed) are counted in DeepSpeed's own buffers by
``deepspeed_state.deepspeed_state_bytes``, since ``state_bytes`` sees only ``param.data`` and
``param.grad``, which DeepSpeed empties: parameters are ``param.data`` (stage 2: the whole flat model) plus
``param.ds_tensor`` (stage 3: this rank's partition; from the second step on, parameters under
``stage3_param_persistence_threshold``, 10⁵ elements, here the biases, also stay gathered: 0.1 MB at
50M, not yet on the first batch, where it is read); gradients are the reduced partition
DeepSpeed keeps for the step (``averaged_gradients``; stage 3's ``grad_partitions_flat_buffer``);
optimizer is AdamW's state plus the fp32 master partition the ZeRO optimizer steps, which DeepSpeed keeps
as a copy even in fp32 training (so 12Ψ/N, not 8Ψ/N; ``deepspeed_state.py`` says where). Not in the
columns: the gradient reduction buckets, ``reduce_bucket_size`` (2·10⁸) elements each, allocated empty
(stage 2: two, with ``overlap_comm``, during backward; stage 3: one for the whole run), into which backward
writes each parameter's unreduced gradient until a bucket is full, so here all 4Ψ of them; a line under
the table gives the bytes allocated, and the peak RSS column holds the part written.

"activations" is the peak of the bytes held for backward over the first batch
(``framework.testing.SavedActivations``: tensors saved for backward, or recomputed in it, until
freed; parameters are not counted), beside the theory for batch b per rank, fp32: each block keeps
its input (b·w), GELU's input and output (2 · b·4w) and the loss the output and the target, so
(9·6 + 2)·b·w·4 bytes; with each block checkpointed (``zero3 + checkpointing``:
``FSDPStrategy(activation_checkpointing_policy={Block})``) the blocks' inputs and the target are
kept and backward recomputes one block at a time, (6 + 1 + 8)·b·w·4 bytes. Its step time beside
zero3's is the cost of recomputing each block's forward in backward.

"peak RSS" is how far the rank process's peak resident set rose during the run (state, DDP's
gradient buckets, gathered parameters, activations, allocator slack). With glibc's default
malloc the sharded runs can keep much of what they free (buffers under its adaptive mmap
threshold, at most 32 MB, stay in the heap), so their RSS overstates what they use;
``MALLOC_MMAP_THRESHOLD_=131072`` in the environment makes freed buffers go back to the system
(and every step slower). The step time is rank 0's mean from the end of one training batch to
the end of the next, after ``--warmup`` steps; the activations are counted on the first batch,
which is never timed. The
"plain" rows are hand-written loops over the same model, data and optimizer in the same kind of
spawned ranks, with the same threads per rank: ``DistributedDataParallel``, and FSDP2's
``fully_shard`` on each block and then the whole, which is what the framework's zero2/zero3 do.

The DeepSpeed rows import DeepSpeed before their RSS baseline, as every row has torch imported.

    python benchmarks/zero_memory.py [--params 50] [--steps 8] [--warmup 2] [--batch-size 16] [--runs 1]
                                     [--rows plain_ddp deepspeed_stage_2 ...]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from deepspeed_state import deepspeed_state_bytes, gradient_bucket_bytes
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import framework as L
from framework.callbacks import Callback
from framework.strategies import FSDPStrategy
from framework.strategies.deepspeed import EXTRA_HINT, deepspeed_available
from framework.testing import SavedActivations, spawn, state_bytes

BLOCKS, RANKS = 6, 2
STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "zero3_checkpointed", "zero3_offload")
DEEPSPEED = ("deepspeed_stage_2", "deepspeed_stage_3")
REDUCE_BUCKET_ELEMENTS = 200_000_000  # DeepSpeedStrategy's reduce_bucket_size (Lightning's default)
# Multiples of Ψ bytes per rank (fp32 parameters and gradients, AdamW's two moments), N = RANKS.
THEORY = {
    "plain_ddp": (4, 4, 8),
    "plain_zero2": (4, 4 / RANKS, 8 / RANKS),
    "plain_zero3": (4 / RANKS, 4 / RANKS, 8 / RANKS),
    "ddp": (4, 4, 8),
    "zero1": (4, 4, 8 / RANKS),
    "zero2": (4, 4 / RANKS, 8 / RANKS),
    "zero3": (4 / RANKS, 4 / RANKS, 8 / RANKS),
    "zero3_checkpointed": (4 / RANKS, 4 / RANKS, 8 / RANKS),
    "zero3_offload": (4 / RANKS, 4 / RANKS, 8 / RANKS),
    "deepspeed_stage_2": (4, 4 / RANKS, 12 / RANKS),
    "deepspeed_stage_3": (4 / RANKS, 4 / RANKS, 12 / RANKS),
}
PLAIN = ("plain_ddp", "plain_zero2", "plain_zero3")
NAMES = {"plain_ddp": "plain DDP", "plain_zero2": "plain FSDP2 ZeRO-2", "plain_zero3": "plain FSDP2 ZeRO-3",
         "zero3_checkpointed": "zero3 + checkpointing",
         **{name: name for name in STRATEGIES[:4] + STRATEGIES[5:] + DEEPSPEED}}


class Block(nn.Module):
    """A transformer's feed-forward block: Linear w -> 4w, GELU, Linear 4w -> w."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.gelu(self.up(x)))


def strategy_for(kind: str) -> Any:
    """What the Trainer is given for a framework row: the strategy's name, or the object for checkpointing."""
    return FSDPStrategy(activation_checkpointing_policy={Block}) if kind == "zero3_checkpointed" else kind


def width_for(params_millions: float) -> int:
    """The block width (a multiple of 64, so every rank's share is even) closest to the parameter count asked."""
    return max(64, round((params_millions * 1e6 / (8 * BLOCKS)) ** 0.5 / 64) * 64)


def parameter_count(width: int) -> int:
    return BLOCKS * (8 * width * width + 5 * width)


def activation_theory(kind: str, width: int, batch_size: int) -> int:
    """Bytes held for backward at the peak, per rank (see the module's docstring)."""
    units = BLOCKS + 1 + 8 if kind == "zero3_checkpointed" else 9 * BLOCKS + 2
    return units * batch_size * width * 4


def make_net(width: int) -> nn.Sequential:
    torch.manual_seed(0)  # every rank starts from the same weights, as fully_shard expects
    return nn.Sequential(*[Block(width) for _ in range(BLOCKS)])


def make_data(width: int, steps: int, batch_size: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    count = steps * batch_size * RANKS
    return TensorDataset(torch.randn(count, width, generator=generator), torch.randn(count, width, generator=generator))


class Stack(L.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.net = make_net(width)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


class Readings:
    """State bytes at the three points of the first batch, the activations' peak in it, and when each batch ended."""

    def __init__(self, count: Callable[[nn.Module, Any], dict[str, int]] = state_bytes) -> None:
        self.bytes = {"parameters": -1, "gradients": -1, "optimizer": -1, "activations": -1, "gradient_bucket": 0}
        self.ends: list[float] = []
        self.saved = SavedActivations()
        self.count = count  # state_bytes, or deepspeed_state_bytes for DeepSpeed's engine

    def batch_started(self) -> None:
        if not self.ends:  # the first batch only: counting slows a step, and this one is not timed
            self.saved.start()

    def batch_ended(self) -> None:
        if not self.ends:
            self.saved.stop()
            self.bytes["activations"] = self.saved.peak
        self.ends.append(time.perf_counter())

    def take(self, kind: str, module: nn.Module, optimizer: Any = None) -> None:
        if self.bytes[kind] < 0:
            self.bytes[kind] = self.count(module, optimizer)[kind]


class Measure(Callback):
    """Readings of a Trainer's run; under DeepSpeed, in its ZeRO optimizer's buffers, with its gradient bucket
    read while backward runs (the first parameter's gradient is among the last made)."""

    def __init__(self, deepspeed: bool = False) -> None:
        super().__init__()
        self.deepspeed = deepspeed
        self.readings = Readings(deepspeed_state_bytes if deepspeed else state_bytes)

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.readings.batch_started()
        if self.deepspeed and not self.readings.ends:
            optimizer = trainer.optimizers[0]  # DeepSpeed's ZeRO optimizer
            handle = next(module.parameters()).register_hook(lambda grad: self._read_bucket(optimizer, handle))

    def on_before_backward(self, trainer, module, loss):
        self.readings.take("parameters", module, trainer.optimizers[0])

    def on_after_backward(self, trainer, module):
        self.readings.take("gradients", module, trainer.optimizers[0])

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.readings.take("optimizer", module, trainer.optimizers[0])  # after the step
        self.readings.batch_ended()

    def _read_bucket(self, optimizer: Any, handle: Any) -> None:
        self.readings.bytes["gradient_bucket"] = gradient_bucket_bytes(optimizer)
        handle.remove()


def run_framework(rank: int, kind: str, width: int, steps: int, batch_size: int) -> dict[str, Any]:
    if kind in DEEPSPEED:  # imported before the RSS baseline, as torch and the framework are
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed  # noqa: F401
    start_rss = _rss_kib()
    measure = Measure(deepspeed=kind in DEEPSPEED)
    trainer = L.Trainer(accelerator="cpu", devices=RANKS, strategy=strategy_for(kind), max_steps=steps, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[measure])
    trainer.fit(Stack(width), DataLoader(make_data(width, steps, batch_size), batch_size=batch_size))
    return _result(measure.readings, start_rss)


def run_plain(rank: int, kind: str, width: int, steps: int, batch_size: int) -> dict[str, Any]:
    """What people write by hand: DistributedDataParallel, or fully_shard on each block and then the whole (the
    units the framework's default policy picks), and AdamW, with the framework's threads per rank."""
    from torch.utils.data import DistributedSampler

    start_rss = _rss_kib()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(max(1, cores // RANKS))
    net = make_net(width)
    if kind == "plain_ddp":
        from torch.nn.parallel import DistributedDataParallel

        model: nn.Module = DistributedDataParallel(net)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (RANKS,))
        reshard = kind == "plain_zero3"
        for block in net:
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard)
        model = fully_shard(net, mesh=mesh, reshard_after_forward=reshard)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = make_data(width, steps, batch_size)
    loader = DataLoader(data, batch_size=batch_size, sampler=DistributedSampler(data, shuffle=False))
    readings = Readings()
    for x, y in loader:
        readings.batch_started()
        loss = nn.functional.mse_loss(model(x), y)
        readings.take("parameters", net)
        loss.backward()
        readings.take("gradients", net)
        optimizer.step()
        readings.take("optimizer", net, optimizer)
        optimizer.zero_grad(set_to_none=True)
        readings.batch_ended()
    return _result(readings, start_rss)


def _rss_kib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _result(readings: Readings, start_rss_kib: int) -> dict[str, Any]:
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {**readings.bytes, "ends": readings.ends, "rss_growth": (peak_kib - start_rss_kib) * 1024}


def measure(kind: str, width: int, steps: int, batch_size: int, warmup: int) -> dict[str, float]:
    """One run on fresh ranks: the largest rank's bytes and RSS growth, rank 0's mean step time (ms)."""
    if kind in PLAIN:
        ranks = spawn(RANKS, run_plain, kind, width, steps, batch_size, timeout=600.0)
    else:
        ranks = spawn(RANKS, run_framework, kind, width, steps, batch_size, timeout=600.0)
    row = {key: max(rank[key] for rank in ranks)
           for key in ("parameters", "gradients", "optimizer", "activations", "gradient_bucket", "rss_growth")}
    ends = ranks[0]["ends"]
    row["step_ms"] = (ends[-1] - ends[warmup]) / (len(ends) - 1 - warmup) * 1000
    return row


KINDS = ("plain_ddp", "ddp", "zero1", "plain_zero2", "zero2", "deepspeed_stage_2", "plain_zero3", "zero3",
         "deepspeed_stage_3", "zero3_checkpointed", "zero3_offload")


def kinds_to_run() -> tuple[tuple[str, ...], str | None]:
    """The rows this machine can run, and why the DeepSpeed rows are left out (None when they run)."""
    if deepspeed_available():
        return KINDS, None
    return tuple(kind for kind in KINDS if kind not in DEEPSPEED), f"DeepSpeed is not installed ({EXTRA_HINT})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", type=float, default=50.0, help="model size in millions of parameters")
    parser.add_argument("--steps", type=int, default=8, help="training steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="steps left out of the step time")
    parser.add_argument("--batch-size", type=int, default=16, help="samples per rank and step")
    parser.add_argument("--runs", type=int, default=1, help="runs of every row, in turn; medians are shown")
    parser.add_argument("--rows", nargs="+", choices=KINDS, default=KINDS, help="run only these rows")
    args = parser.parse_args()
    if args.steps < args.warmup + 2:
        parser.error(f"--steps must be at least --warmup + 2 ({args.warmup + 2}) to time a step")

    width = width_for(args.params)
    kinds, skipped = kinds_to_run()
    kinds = tuple(kind for kind in kinds if kind in args.rows)
    skipped = skipped if set(DEEPSPEED) & set(args.rows) else None
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    for _ in range(args.runs):
        for kind in kinds:
            runs[kind].append(measure(kind, width, args.steps, args.batch_size, args.warmup))
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, {RANKS} ranks (gloo), {BLOCKS} blocks of width "
          f"{width} (hidden {4 * width}): Ψ = {parameter_count(width) / 1e6:.1f}M fp32 parameters, AdamW, batch "
          f"{args.batch_size} per rank, {args.steps} steps ({args.warmup} warm-up), median of {args.runs} run(s)")
    print_table(runs, width, args.batch_size, skipped)


def print_table(runs: dict[str, list[dict[str, float]]], width: int, batch_size: int, skipped: str | None) -> None:
    """One row per kind of run: medians of its runs, beside the theory; then DeepSpeed's gradient buckets (or why
    its rows were skipped) and what recomputation cost."""
    mb, psi = 1e6, parameter_count(width)
    rows = {kind: {key: statistics.median(run[key] for run in runs[kind]) for key in runs[kind][0]} for kind in runs}
    print("MB per rank (largest rank), measured | theory")
    print("| run                   | params | theory | grads | theory | optimizer | theory |  total | theory | "
          "activations | theory | peak RSS +MB | ms/step | runs' range | × plain DDP |")
    print("|:----------------------|-------:|-------:|------:|-------:|----------:|-------:|-------:|-------:|"
          "------------:|-------:|-------------:|--------:|------------:|------------:|")
    plain_ms = rows["plain_ddp"]["step_ms"] if "plain_ddp" in rows else float("nan")
    for kind in rows:
        row = rows[kind]
        params, grads, optimizer = (row[key] / mb for key in ("parameters", "gradients", "optimizer"))
        params_theory, grads_theory, optimizer_theory = (share * psi / mb for share in THEORY[kind])
        total, total_theory = params + grads + optimizer, params_theory + grads_theory + optimizer_theory
        activations, activations_theory = row["activations"] / mb, activation_theory(kind, width, batch_size) / mb
        times = [run["step_ms"] for run in runs[kind]]
        spread = f"{min(times):.0f}–{max(times):.0f}"
        print(f"| {NAMES[kind]:<21} | {params:>6.1f} | {params_theory:>6.1f} | {grads:>5.1f} | {grads_theory:>6.1f} | "
              f"{optimizer:>9.1f} | {optimizer_theory:>6.1f} | {total:>6.1f} | {total_theory:>6.1f} | "
              f"{activations:>11.2f} | {activations_theory:>6.2f} | {row['rss_growth'] / mb:>12.0f} | "
              f"{row['step_ms']:>7.0f} | {spread:>11} | {row['step_ms'] / plain_ms:>10.2f}x |")
    if skipped is not None:
        print(f"Skipped: {', '.join(DEEPSPEED)}: {skipped}.")
    elif set(DEEPSPEED) & set(rows):
        buckets = ", ".join(f"{kind} {rows[kind]['gradient_bucket'] / mb:.0f} MB" for kind in DEEPSPEED if kind in rows)
        print(f"Not in the grads column: DeepSpeed's gradient reduction buckets, allocated per rank while backward "
              f"runs ({buckets}); backward writes each unreduced gradient into them until one is full, "
              f"{min(psi, REDUCE_BUCKET_ELEMENTS) * 4 / mb:.1f} MB here, which only the peak RSS column holds.")
    if "zero3" not in rows or "zero3_checkpointed" not in rows:
        return
    zero3, checkpointed = rows["zero3"], rows["zero3_checkpointed"]
    print(f"Activation checkpointing on zero3: activations {zero3['activations'] / mb:.2f} -> "
          f"{checkpointed['activations'] / mb:.2f} MB per rank "
          f"({zero3['activations'] / checkpointed['activations']:.1f}x fewer), step {zero3['step_ms']:.0f} -> "
          f"{checkpointed['step_ms']:.0f} ms ({checkpointed['step_ms'] / zero3['step_ms']:.2f}x; backward runs each "
          "block's forward again)")


if __name__ == "__main__":
    main()
