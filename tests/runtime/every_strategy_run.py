"""Fits two CPU ranks with every strategy, each in another precision, with the built-in callbacks and both loggers,
then validates and predicts, and runs a hand-written loop on the Runtime; a backward pass in this process comes
first. Rank 0 writes what came out to OUT/results.pt.

Usage: every_strategy_run.py OUT [--touch-cuda] [--forked] [--then-one-device]. ``tests/runtime/test_start_method.py``
runs it as a script, from a function (``python -c``: no script to run again), and under ``framework launch``, with
CUDA made to look present (``tests/fake_cuda``) and without. ``--touch-cuda`` adds a callback that calls into CUDA
because it is available, what a CPU run must never do, to show that such a call is caught. ``--forked`` (on a
machine without CUDA, where ``"ddp"`` forks) fits the ``ddp_spawn`` run with ``"ddp"``: every result then comes
from forked ranks.
``--then-one-device`` builds, last, a Trainer(devices=1), and prints ``refused: <the error>`` where it is refused.
"""

from __future__ import annotations

import importlib
import os
import sys

import torch

import framework
from framework.callbacks import (
    Callback,
    EarlyStopping,
    LearningRateMonitor,
    ModelCheckpoint,
    ThroughputMonitor,
    Timer,
)
from framework.loggers import CSVLogger, TensorBoardLogger
from tests.helpers import Regressor, loader

RUNS = [("ddp", "32-true"), ("ddp_spawn", "16-mixed"), ("zero1", "bf16-mixed"), ("zero2", "16-mixed"),
        ("zero3", "bf16-mixed"), ("zero3_offload", "32-true"), ("ddp", "bf16-true"), ("ddp", "64-true")]


class TouchesCuda(Callback):
    """A CUDA call made because CUDA is available, in a run on the CPU."""

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if torch.cuda.is_available():
            torch.cuda.synchronize()


def fit_validate_predict(out: str, strategy: str, precision: str, touch_cuda: bool) -> dict:
    torch.manual_seed(0)
    model = Regressor()
    folder = os.path.join(out, f"{strategy}-{precision}")
    callbacks = [ModelCheckpoint(monitor="val_loss", save_last=True), EarlyStopping("val_loss", patience=3),
                 LearningRateMonitor(), Timer(), ThroughputMonitor()]
    if touch_cuda:
        callbacks.append(TouchesCuda())
    trainer = framework.Trainer(
        accelerator="cpu", devices=2, strategy=strategy, precision=precision, max_epochs=2, default_root_dir=folder,
        callbacks=callbacks, logger=[CSVLogger(folder), TensorBoardLogger(folder)],
        log_every_n_steps=1,
    )
    trainer.fit(model, loader(shuffle=True), loader(n=24))
    validated = trainer.validate(model, loader(n=24), verbose=False)
    predictions = trainer.predict(model, loader(n=24))
    sharded = any(hasattr(value, "full_tensor") for value in model.state_dict().values())
    weights = {name: value.full_tensor() if hasattr(value, "full_tensor") else value  # launched ranks: sharded
               for name, value in model.state_dict().items()}
    return {"weights": {name: value.detach().float().cpu() for name, value in weights.items()}, "sharded": sharded,
            "val_loss": validated[0]["val_loss"], "predictions": torch.cat(predictions).float(),
            "best": os.path.basename(trainer.checkpoint_callback.best_model_path),
            "global_step": trainer.global_step, "is_global_zero": trainer.is_global_zero}


def own_loop(runtime: framework.Runtime, out: str) -> dict:
    """A hand-written loop on the Runtime (Fabric's API), saving a sharded checkpoint at its end."""
    torch.manual_seed(0)
    model = Regressor()
    model, optimizer = runtime.setup(model, torch.optim.SGD(model.parameters(), lr=0.05))
    for _ in range(2):
        for x, y in runtime.setup_dataloaders(loader()):
            runtime.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
    runtime.save(os.path.join(out, "own_loop.ckpt"), {"model": model, "optimizer": optimizer})
    weights = {name: value.full_tensor() if hasattr(value, "full_tensor") else value
               for name, value in model.state_dict().items()}
    return {"weights": {name: value.detach().float().cpu() for name, value in weights.items()},
            "is_global_zero": runtime.is_global_zero}


def main(out: str, touch_cuda: bool = False, runs: list[tuple[str, str]] = RUNS, forked: bool = False,
         then_one_device: bool = False) -> None:
    if forked:  # imported once here, not again in each of the ~50 forked ranks (only the reference run forks)
        for name in ("torch._dynamo", "torch.distributed.fsdp", "torch.nn.parallel"):
            importlib.import_module(name)
    torch.nn.Linear(4, 1)(torch.randn(2, 4)).sum().backward()  # where CUDA devices exist, autograd's threads start
    results = {f"{strategy} {precision}": fit_validate_predict(
        out, "ddp" if forked and strategy == "ddp_spawn" else strategy, precision, touch_cuda)
        for strategy, precision in runs}
    runtime = framework.Runtime(accelerator="cpu", devices=2, strategy="zero3", precision="bf16-mixed")
    results["own loop, zero3"] = runtime.launch(own_loop, out)
    if all(result["is_global_zero"] for result in results.values()):
        torch.save(results, os.path.join(out, "results.pt"))
    if then_one_device:
        try:
            framework.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False)
        except framework.MisconfigurationError as error:
            sys.stdout.write(f"refused: {error}\n")  # one write: both ranks print into one pipe
            sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], touch_cuda="--touch-cuda" in sys.argv, forked="--forked" in sys.argv,
         then_one_device="--then-one-device" in sys.argv)
