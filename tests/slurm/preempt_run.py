"""The DDP training of ``tests/trainer/restart_run.py`` (shuffling, dropout, accumulation, a scheduler, two loader
workers, a CSV log, a ModelCheckpoint every step), as a SLURM job step runs it:

    srun python tests/slurm/preempt_run.py WORKDIR [WAIT_STEP]

The Trainer asks for as many devices as SLURM started tasks (``SLURM_NTASKS``; 2 elsewhere, e.g. under
``framework launch --nproc-per-node 2``), so under ``srun -n 2`` it joins the two SLURM ranks. ``fit`` has no
``ckpt_path``: a requeued job resumes by itself.

``WAIT_STEP``: in the job's first run, at that global step each rank writes ``WORKDIR/ready-<rank>`` and waits (up
to 60 s) for a preemption signal (``scancel --signal``), so the signal lands mid-training whatever the machine's
speed. Each start of a rank appends ``<rank> <SLURM_RESTART_COUNT>`` to ``WORKDIR/starts``; rank 0 writes the final
weights, optimizer state and global step to ``WORKDIR/result.pt``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import framework  # noqa: E402
from framework.callbacks import ModelCheckpoint  # noqa: E402
from framework.loggers import CSVLogger  # noqa: E402
from tests.trainer.restart_run import Noisy, data  # noqa: E402


class WaitForSignal(framework.Callback):
    """At ``step`` of a run that did not resume: say so in a file, then wait until this rank got a preemption
    signal (the fit loop saves and leaves at the next step boundary)."""

    def __init__(self, step: int, work: Path) -> None:
        self.step, self.work = step, work

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step != self.step or trainer.ckpt_path is not None:
            return
        (self.work / f"ready-{trainer.global_rank}").write_text(str(os.getpid()))
        deadline = time.monotonic() + 60
        while not trainer.fit_loop.preemption.wished and time.monotonic() < deadline:
            time.sleep(0.02)


def main(workdir: str, wait_step: str = "") -> None:
    work = Path(workdir)
    torch.set_num_threads(1)
    rank = os.environ.get("SLURM_PROCID", os.environ.get("RANK", "0"))
    with open(work / "starts", "a") as starts:
        starts.write(f"{rank} {os.environ.get('SLURM_RESTART_COUNT', '-')}\n")
    framework.seed_everything(0, verbose=False)
    callbacks = [ModelCheckpoint(dirpath=work / "checkpoints", save_last=True, every_n_train_steps=1)]
    if wait_step:
        callbacks.append(WaitForSignal(int(wait_step), work))
    trainer = framework.Trainer(max_epochs=3, accelerator="cpu", devices=int(os.environ.get("SLURM_NTASKS", "2")),
                                strategy="ddp", default_root_dir=work, logger=CSVLogger(work, name="logs", version=0),
                                log_every_n_steps=1, accumulate_grad_batches=2, enable_progress_bar=False,
                                enable_model_summary=False, callbacks=callbacks)
    model = Noisy()
    trainer.fit(model, data(2, None), data(0))
    if trainer.is_global_zero:
        torch.save({"weights": model.state_dict(), "optimizer": trainer.optimizers[0].state_dict(),
                    "global_step": trainer.global_step}, work / "result.pt")


if __name__ == "__main__":
    main(*sys.argv[1:3])
