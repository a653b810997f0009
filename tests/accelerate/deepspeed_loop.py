"""An Accelerate loop on DeepSpeed, for ``framework launch --use_deepspeed`` (or a DeepSpeed config) tests. Each
rank saves what it saw to OUT/<mode>_rank<rank>.pt, and the names of its threads still running at its last exit
handler to OUT/<mode>_rank<rank>.threads.

    framework launch --cpu --num_processes 2 --use_deepspeed ... tests/accelerate/deepspeed_loop.py OUT MODE

MODE ``torch``: the model and a torch AdamW, two epochs. ``dummy``: DummyOptim and DummyScheduler for the config's
optimizer and scheduler blocks; one epoch, ``save_state(OUT/state)``, the second epoch. ``resume``: as ``dummy``,
but ``load_state(OUT/state)`` instead of the first epoch.
"""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from framework.accelerate import Accelerator  # noqa: E402
from framework.accelerate.utils import DummyOptim, DummyScheduler  # noqa: E402
from tests.accelerate.loops import data, model_and_optimizer  # noqa: E402
from tests.strategies.launched_run import write_threads  # noqa: E402


def epoch(accelerator: Accelerator, model, optimizer, scheduler, loader, seen: dict) -> None:
    model.train()
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            seen["syncs"].append(accelerator.sync_gradients)
            seen["norms"].append(accelerator.clip_grad_norm_(model.parameters(), 1.0))
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            optimizer.zero_grad()
            seen["losses"].append(loss.item())
            seen["lrs"].append(optimizer.param_groups[0]["lr"])


def main(out: Path, mode: str) -> None:
    atexit.register(write_threads, out / f"{mode}_rank{os.environ.get('RANK', '0')}.threads")  # first: runs last
    model, torch_optimizer = model_and_optimizer(dropout=0.0, adamw=True)
    accelerator = Accelerator(cpu=True)
    loader = DataLoader(data(64), batch_size=4, shuffle=True)
    if mode == "torch":  # a torch scheduler that keeps the rate, to count its steps
        constant = torch.optim.lr_scheduler.LambdaLR(torch_optimizer, lambda step: 1.0)
        model, optimizer, loader, scheduler = accelerator.prepare(model, torch_optimizer, loader, constant)
    else:
        optimizer = DummyOptim(model.parameters(), lr=0.02, weight_decay=0.01)
        scheduler = DummyScheduler(optimizer, total_num_steps=16, warmup_num_steps=2)
        model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    seen: dict = {"syncs": [], "norms": [], "losses": [], "lrs": []}
    if mode == "resume":
        accelerator.load_state(out / "state")
    else:
        epoch(accelerator, model, optimizer, scheduler, loader, seen)
    if mode == "dummy":
        accelerator.save_state(out / "state")
    epoch(accelerator, model, optimizer, scheduler, loader, seen)
    plugin = accelerator.state.deepspeed_plugin
    result = {**seen, "weights": {name: value.float().clone() for name, value in
                                  accelerator.get_state_dict(model).items()},
              "distributed_type": accelerator.distributed_type.value, "config": plugin.deepspeed_config,
              "mixed_precision": accelerator.mixed_precision, "accumulation": accelerator.gradient_accumulation_steps,
              "unwrapped": type(accelerator.unwrap_model(model)).__name__,
              "scheduler": [type(scheduler).__name__, scheduler.state_dict().get(
                  "last_epoch", scheduler.state_dict().get("last_batch_iteration"))]}
    torch.save(result, out / f"{mode}_rank{os.environ.get('RANK', '0')}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
