"""Training-step speed of a GPT-2-small and a DistilBERT-shaped model: the plain loop, the framework, Lightning.

Both models are written here with random weights (nothing is downloaded): a GPT-2-small
decoder (12 pre-norm blocks, width 768, 12 heads, 50,257 tokens, the head tied to the
embedding) trained on next-token prediction over 16 x 1024 tokens, and a DistilBERT encoder
(6 post-norm blocks, width 768, 30,522 tokens) fine-tuned as a 2-class classifier over
12 x 512 tokens. AdamW (fused), batches already on the device, ``self.log`` of the loss on
every step. ``--size tiny`` shrinks both to run in seconds on a CPU.

Rows, for each model and precision:

- plain: the hand-written loop, eager; with ``torch.compile(model)`` (forward compiled); and
  with the function computing the loss compiled (the whole step: forward and loss).
- framework: ``Trainer(precision=..., compile=...)`` without logger, progress bar or
  checkpointing; "defaults" adds the Trainer's defaults (logger, progress bar, checkpoints).
- Lightning (when importable): ``L.Trainer`` with ``fit(model)`` and ``fit(torch.compile(model))``.

Columns: ms per step (timed steps after ``--warmup``, the device synchronised only at both
ends), tokens per second, model FLOPs utilisation (6 x matmul parameters x tokens, plus
attention, against the device's dense bf16 peak; GPUs in the table below only), peak
memory (CUDA only), host syncs per step (on CUDA: operations torch's sync debug mode reports;
on a CPU: tensor values read on the host, ``framework.testing.count_host_reads``), graphs
compiled during the timed steps (recompiles), and the time against the best plain loop of the
same precision (eager rows against the eager loop, compiled rows against the whole-step one).

    python benchmarks/gpu.py                                   # everything, full size, on the GPU
    python benchmarks/gpu.py --models gpt2 --precisions bf16-mixed 16-mixed
    python benchmarks/gpu.py --size tiny --backend eager       # seconds on a CPU (what CI runs)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import io
import logging
import math
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator

import torch
import torch._dynamo
from common import Batches, importable
from torch import nn
from torch._dynamo.utils import counters
from torch.nn import functional as F

import framework
from framework.testing import count_host_reads

PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true")
# Dense bf16 peak FLOP/s by device name (tensor cores, no sparsity).
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10G": 125e12}


@dataclasses.dataclass(frozen=True)
class Shape:
    vocab: int
    width: int
    heads: int
    layers: int
    tokens: int  # per sequence
    batch: int
    causal: bool  # GPT-2: next-token prediction; DistilBERT: classification of the whole sequence


SIZES = {
    "full": {"gpt2": Shape(50257, 768, 12, 12, 1024, 16, True), "distilbert": Shape(30522, 768, 12, 6, 512, 12, False)},
    "tiny": {"gpt2": Shape(512, 64, 4, 2, 64, 4, True), "distilbert": Shape(512, 64, 4, 2, 64, 4, False)},
}


# -- the models ---------------------------------------------------------------------------------------------------
class Block(nn.Module):
    """Self-attention and a GELU MLP; pre-norm (GPT-2) or post-norm (BERT)."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.heads, self.causal = shape.heads, shape.causal
        self.qkv = nn.Linear(shape.width, 3 * shape.width)
        self.projection = nn.Linear(shape.width, shape.width)
        self.mlp = nn.Sequential(nn.Linear(shape.width, 4 * shape.width), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * shape.width, shape.width))
        self.norm1, self.norm2 = nn.LayerNorm(shape.width), nn.LayerNorm(shape.width)

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = (part.view(batch, length, self.heads, -1).transpose(1, 2) for part in self.qkv(x).split(width, 2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.projection(y.transpose(1, 2).reshape(batch, length, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.causal:  # GPT-2
            x = x + self.attend(self.norm1(x))
            return x + self.mlp(self.norm2(x))
        x = self.norm1(x + self.attend(x))
        return self.norm2(x + self.mlp(x))


class Transformer(nn.Module):
    """GPT-2 (causal, head tied to the embedding, logits per token) or DistilBERT (2 classes per sequence)."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.shape = shape
        self.embed = nn.Embedding(shape.vocab, shape.width)
        self.position = nn.Embedding(shape.tokens, shape.width)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = nn.LayerNorm(shape.width)
        self.classifier = None if shape.causal else nn.Linear(shape.width, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position.weight[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        return x @ self.embed.weight.t() if self.classifier is None else self.classifier(x[:, 0])


def loss_of(net: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    tokens, targets = batch
    logits = net(tokens)
    return F.cross_entropy(logits.flatten(0, -2).float(), targets.flatten())


def make_batches(shape: Shape, count: int, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(count):
        tokens = torch.randint(0, shape.vocab, (shape.batch, shape.tokens + 1), generator=generator)
        targets = tokens[:, 1:] if shape.causal else torch.randint(0, 2, (shape.batch,), generator=generator)
        batches.append((tokens[:, :-1].to(device), targets.to(device)))
    return batches


def flops_per_step(shape: Shape) -> float:
    """6 x (matmul parameters) x tokens for forward and backward, plus attention's two matmuls."""
    block = 12 * shape.width**2  # qkv 3w^2, projection w^2, MLP 8w^2
    head = shape.vocab * shape.width if shape.causal else 2 * shape.width
    tokens = shape.batch * shape.tokens
    return 6 * (shape.layers * block + head) * tokens + 12 * shape.layers * shape.tokens * shape.width * tokens


def make_optimizer(net: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(net.parameters(), lr=1e-4, fused=True)


# -- measuring ------------------------------------------------------------------------------------------------------
class Meter:
    """Times the steps after the warm-up (to the end of the last one) and counts their host syncs and the graphs
    compiled meanwhile."""

    def __init__(self, device: torch.device, warmup: int, steps: int) -> None:
        self.device, self.warmup, self.total = device, warmup, warmup + steps
        self.seen = 0
        self._stack = contextlib.ExitStack()
        self.result: dict[str, float] = {}

    def step_starts(self) -> None:
        if self.seen == self.warmup:
            self._synchronize()
            self._graphs_before = counters["stats"]["unique_graphs"]
            self._syncs = self._stack.enter_context(_counting_syncs(self.device))
            self._started = time.perf_counter()
        self.seen += 1

    def step_ends(self) -> None:
        if self.seen != self.total:
            return
        self._synchronize()
        elapsed = time.perf_counter() - self._started
        steps = self.total - self.warmup
        self.result = {"seconds": elapsed / steps, "syncs": self._syncs() / steps,
                       "recompiles": counters["stats"]["unique_graphs"] - self._graphs_before}
        self._stack.close()

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


@contextlib.contextmanager
def _counting_syncs(device: torch.device) -> Iterator[Callable[[], int]]:
    if device.type != "cuda":
        with count_host_reads() as reads:
            yield lambda: reads.total
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield lambda: sum("synchroniz" in str(warning.message) for warning in caught)
        finally:
            torch.cuda.set_sync_debug_mode("default")


class MeterCallback:
    """The Meter as a Trainer callback (framework's and Lightning's hooks have the same names)."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.meter.step_starts()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.meter.step_ends()


# -- the loops ------------------------------------------------------------------------------------------------------
def autocast_dtype(precision: str) -> torch.dtype | None:
    return {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)


def plain(shape, precision, batches, device, warmup, backend, *, compiled=None) -> dict[str, float]:
    net = Transformer(shape).to(device)
    if precision == "bf16-true":
        net = net.to(torch.bfloat16)
    optimizer = make_optimizer(net)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "16-mixed")
    dtype = autocast_dtype(precision)
    forward = torch.compile(net, backend=backend) if compiled == "forward" else net
    compute_loss = torch.compile(loss_of, backend=backend) if compiled == "step" else loss_of
    meter = Meter(device, warmup, len(batches) - warmup)
    for batch in batches:
        meter.step_starts()
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = compute_loss(forward, batch)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        meter.step_ends()
    return meter.result


class Task(framework.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.net = Transformer(shape)

    def training_step(self, batch, batch_idx):
        loss = loss_of(self.net, batch)
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return make_optimizer(self)


def trainer_settings(device: torch.device, precision: str, defaults: bool, root: str) -> dict:
    quiet = {} if defaults else dict(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    return dict(accelerator=device.type, devices=1, precision=precision, max_epochs=1, num_sanity_val_steps=0,
                enable_model_summary=False, default_root_dir=root, **quiet)


def with_framework(shape, precision, batches, device, warmup, backend, *, compiled=False, defaults=False) -> dict:
    meter = Meter(device, warmup, len(batches) - warmup)
    callback = type("Meter", (MeterCallback, framework.Callback), {})(meter)
    with tempfile.TemporaryDirectory() as root:
        trainer = framework.Trainer(**trainer_settings(device, precision, defaults, root), callbacks=[callback],
                                    compile={"backend": backend} if compiled else False)
        trainer.fit(Task(shape), Batches(batches))
        return meter.result


def with_lightning(shape, precision, batches, device, warmup, backend, *, compiled=False) -> dict:
    import lightning as L

    class LightningTask(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = Transformer(shape)

        training_step = Task.training_step
        configure_optimizers = Task.configure_optimizers

    meter = Meter(device, warmup, len(batches) - warmup)
    callback = type("Meter", (MeterCallback, L.Callback), {})(meter)
    with tempfile.TemporaryDirectory() as root:
        trainer = L.Trainer(**trainer_settings(device, precision, False, root), callbacks=[callback])
        model = LightningTask()
        trainer.fit(torch.compile(model, backend=backend) if compiled else model, Batches(batches))
        return meter.result


def loops(lightning: bool) -> list[tuple[str, str, Callable[..., dict]]]:
    """(loop, what is compiled, runner) for each row of one model and precision."""
    rows = [("plain", "-", plain),
            ("plain", "forward", functools.partial(plain, compiled="forward")),
            ("plain", "step", functools.partial(plain, compiled="step")),
            ("framework", "-", with_framework),
            ("framework", "compile=", functools.partial(with_framework, compiled=True))]
    if lightning:
        rows += [("Lightning", "-", with_lightning),
                 ("Lightning", "torch.compile", functools.partial(with_lightning, compiled=True))]
    return rows


# -- the table ------------------------------------------------------------------------------------------------------
def measure(run: Callable[[], dict], device: torch.device) -> dict:
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    result = run()
    result["peak_gb"] = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else math.nan
    return result


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((flops for key, flops in PEAK_FLOPS.items() if key in name), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--models", nargs="+", choices=["gpt2", "distilbert"], default=["gpt2", "distilbert"])
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=10, help="steps before timing (compiling happens here)")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend of every compiled row")
    parser.add_argument("--no-lightning", action="store_true", help="leave Lightning out even where importable")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.set_float32_matmul_precision("high")  # TF32 for 32-true on GPUs, as most runs set it
    lightning = not args.no_lightning and importable("lightning")
    peak = peak_flops(device)

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{name}, torch {torch.__version__}, size {args.size}, {args.steps} timed steps after {args.warmup}, "
          f"compile backend {args.backend}")
    header = (f"{'model':<10} {'loop':<10} {'precision':<10} {'compiled':<13} {'ms/step':>8} {'tokens/s':>10} "
              f"{'MFU':>5} {'peak-GB':>7} {'syncs/step':>10} {'recompiles':>10} {'x-plain':>7}")
    print(header)
    for model in args.models:
        shape = SIZES[args.size][model]
        batches = make_batches(shape, args.warmup + args.steps, device)
        for precision in args.precisions:
            arguments = (shape, precision, batches, device, args.warmup, args.backend)
            rows = [(loop, compiled, measure(functools.partial(run, *arguments), device))
                    for loop, compiled, run in loops(lightning)]
            if model == "gpt2" and precision == "bf16-mixed":  # what the Trainer's defaults cost
                with contextlib.redirect_stdout(io.StringIO()):  # the progress bar's line, outside a terminal
                    defaults = measure(functools.partial(with_framework, *arguments, defaults=True), device)
                rows.append(("framework", "defaults", defaults))
            best = {compiled: result["seconds"] for loop, compiled, result in rows if loop == "plain"}
            for loop, compiled, result in rows:
                base = best["-" if compiled in ("-", "defaults") else "step"]
                _print_row(model, loop, precision, compiled, result, shape, peak, base)


def _print_row(model, loop, precision, compiled, result, shape, peak, base) -> None:
    seconds = result["seconds"]
    tokens = shape.batch * shape.tokens / seconds
    mfu = f"{flops_per_step(shape) / seconds / peak:.0%}" if peak else "-"
    memory = "-" if math.isnan(result["peak_gb"]) else f"{result['peak_gb']:.1f}"
    print(f"{model:<10} {loop:<10} {precision:<10} {compiled:<13} {seconds * 1e3:>8.1f} {tokens:>10.0f} {mfu:>5} "
          f"{memory:>7} {result['syncs']:>10.2f} {result['recompiles']:>10} {seconds / base:>7.2f}")


if __name__ == "__main__":
    main()
