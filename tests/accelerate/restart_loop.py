"""An Accelerate loop that resumes as Accelerate's examples/by_feature/checkpointing.py does, for the restart tests:

    python -m framework launch --nproc-per-node 2 --max-restarts 2 tests/accelerate/restart_loop.py WORKDIR [FAULT...]

It trains with shuffling, dropout, a scheduler and gradient accumulation, saves its state after every optimizer step
(automatic naming, ``total_limit=2``) and, when a state is there, loads the newest complete one and skips the
batches already done. ``FAULT`` is ``step:N`` (rank 1 SIGKILLs itself after optimizer step N, before saving it) or
``save:N`` (inside ``save_state`` of step N, while the main process writes); each once: a marker file in WORKDIR
remembers it, so with several faults each strikes in turn, in the run the restart after the one before started.
Each start of a rank appends ``<restart count> <rank>`` to ``WORKDIR/starts``; the main process writes the final
weights to ``WORKDIR/weights.pt``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from framework.accelerate import Accelerator
from framework.accelerate.utils import ProjectConfiguration, set_seed

EPOCHS = 3


class Progress:
    """The batches done so far, saved by save_state through register_for_checkpointing."""

    def __init__(self) -> None:
        self.batches = 0

    def state_dict(self) -> dict:
        return {"batches": self.batches}

    def load_state_dict(self, state: dict) -> None:
        self.batches = state["batches"]


def main(work: Path, faults: list[str]) -> None:
    rank, attempt = int(os.environ.get("RANK", "0")), os.environ.get("FRAMEWORK_RESTART_COUNT", "0")
    with open(work / "starts", "a") as starts:
        starts.write(f"{attempt} {rank}\n")

    def die_if_due(where: str, step: int) -> None:
        marker = work / f"fault-done-{where}-{step}"
        if f"{where}:{step}" in faults and rank == 1 and not marker.exists():
            marker.write_text(where)
            os.kill(os.getpid(), signal.SIGKILL)

    set_seed(0)
    project = ProjectConfiguration(project_dir=str(work / "run"), automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2, project_config=project)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(48, 4, generator=generator)
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True).sin()), batch_size=4, shuffle=True)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Dropout(0.3), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.8)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)

    def steps() -> int:
        return progress.batches // accelerator.gradient_accumulation_steps

    accelerator.register_save_state_pre_hook(lambda models, weights, folder: die_if_due("save", steps()))

    # The resume, as the documentation tells it: the newest complete state, then the batches it had done skipped.
    starting_epoch, resume_step = 0, 0
    if os.path.isdir(os.path.join(project.project_dir, "checkpoints")):
        accelerator.load_state()
        starting_epoch, resume_step = divmod(progress.batches, len(loader))
    for epoch in range(starting_epoch, EPOCHS):
        model.train()
        batches = loader
        if epoch == starting_epoch and resume_step:
            batches = accelerator.skip_first_batches(loader, resume_step)
        for inputs, targets in batches:
            with accelerator.accumulate(model):
                loss = nn.functional.mse_loss(model(inputs), targets)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            progress.batches += 1
            if accelerator.sync_gradients:  # a whole optimizer step: nothing half-accumulated to lose
                die_if_due("step", steps())
                accelerator.save_state()
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        torch.save(accelerator.unwrap_model(model).state_dict(), work / "weights.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
