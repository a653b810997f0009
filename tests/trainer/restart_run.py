"""A Lightning-form DDP script for the restart and preemption tests, started by ``framework launch``:

    python -m framework launch --nproc-per-node 2 --max-restarts 2 tests/trainer/restart_run.py WORKDIR [FAULT]

It trains with shuffling, dropout, gradient accumulation, a scheduler and two loader workers, saves a last
checkpoint every step and resumes by itself (``fit`` without ``ckpt_path``). ``FAULT`` is
``KIND:RANK:STEP[:WHERE]`` (KIND one of kill, raise, stall, SIGUSR1, SIGTERM, SIGUSR2): at that global step, rank
RANK is killed, raises, stalls (five minutes in a C++ call that is not a collective, as in a long kernel), or
receives the signal, at the end of a training batch, or WHERE says: ``val`` (in a validation
batch), ``save`` (while a checkpoint is saved), ``epochend`` (in ``on_train_epoch_end``), ``worker`` (sent by a loader
worker of the rank while it fetches, to the rank and to itself). It happens once: a marker file in WORKDIR remembers
it. Several faults, separated by commas, each happen once. Each start of a rank appends
a line to ``WORKDIR/starts``; rank 0 writes the final weights, optimizer state and global step to
``WORKDIR/result.pt``. Run as ``python restart_run.py WORKDIR [FAULT]`` with ``RESTART_RUN_RESTARTS=N``, the Trainer
starts the ranks itself with ``DDPStrategy(max_restarts=N, start_method=$RESTART_RUN_START)``.
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import framework
from framework.callbacks import ModelCheckpoint
from framework.loggers import CSVLogger, TensorBoardLogger
from framework.strategies import DDPStrategy


class Noisy(framework.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.3), nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss, on_step=True, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)]


class Fault(framework.Callback):
    """Does ``kind`` to rank ``rank`` once, at ``step`` (the marker file says it is done), where ``where`` says."""

    def __init__(self, spec: str, work: Path, number: int = 0) -> None:
        kind, rank, step, *where = spec.split(":")
        self.kind, self.rank, self.step, self.where = kind, int(rank), int(step), where[0] if where else "batch"
        suffix = f"-{number}" if number else ""
        self.marker, self.go = work / f"fault-done{suffix}", work / "fault-go"

    def _due(self, trainer, where: str) -> bool:
        return (self.where == where and trainer.global_rank == self.rank and trainer.global_step == self.step
                and not self.marker.exists())

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if self._due(trainer, "worker"):
            self.go.write_text(self.kind)  # the rank's loader workers act on it while fetching the next batches

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self._due(trainer, "batch"):
            self._do()

    def on_validation_batch_end(self, trainer, module, outputs, batch, batch_idx, dataloader_idx=0):
        if self._due(trainer, "val"):
            self._do()

    def on_save_checkpoint(self, trainer, module, checkpoint):
        if self._due(trainer, "save"):
            self._do()

    def on_train_epoch_end(self, trainer, module):
        if self._due(trainer, "epochend"):
            self._do()

    def _do(self) -> None:
        self.marker.write_text(self.kind)
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.kind == "raise":
            raise ValueError("a bug in the training script")
        elif self.kind == "stall":  # in a C++ call that runs no Python signal handler, as a collective waiting
            torch.distributed.distributed_c10d._get_default_store().wait(["never set"], timedelta(seconds=300))
        else:
            os.kill(os.getpid(), getattr(signal, self.kind))


class Pairs(TensorDataset):
    """The samples; in a loader worker, once ``fault-go`` is there, signals the rank and the worker itself."""

    def __init__(self, x: torch.Tensor, work: Path | None) -> None:
        super().__init__(x, x.sum(1, keepdim=True))
        self.work = work

    def __getitem__(self, index):
        if self.work is not None and (self.work / "fault-go").exists() and not (self.work / "fault-done").exists():
            kind = (self.work / "fault-go").read_text()
            (self.work / "fault-done").write_text(kind)
            os.kill(os.getppid(), getattr(signal, kind))  # the rank, while its worker fetches
            os.kill(os.getpid(), getattr(signal, kind))  # the worker too, as SLURM signals every process
        return super().__getitem__(index)


def data(workers: int, work: Path | None = None) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(48, 4, generator=generator)
    return DataLoader(Pairs(x, work if workers else None), batch_size=4, shuffle=True, num_workers=workers,
                      persistent_workers=workers > 0)


def main(workdir: str, fault: str = "") -> None:
    work = Path(workdir)
    torch.set_num_threads(1)
    with open(work / "starts", "a") as starts:
        starts.write(f"{os.environ.get('RANK', '0')} {os.environ.get('FRAMEWORK_RESTART_COUNT', '-')}\n")
    framework.seed_everything(0, verbose=False)
    callbacks = [ModelCheckpoint(dirpath=work / "checkpoints", save_last=True, every_n_train_steps=1)]
    if fault:
        callbacks += [Fault(spec, work, number) for number, spec in enumerate(fault.split(","))]
    workers = int(os.environ.get("RESTART_RUN_WORKERS", "2"))
    # RESTART_RUN_RESTARTS: run as a plain script, the Trainer starting the ranks itself and restarting them
    strategy = "ddp"
    if "RESTART_RUN_RESTARTS" in os.environ:
        strategy = DDPStrategy(max_restarts=int(os.environ["RESTART_RUN_RESTARTS"]),
                               start_method=os.environ.get("RESTART_RUN_START", "auto"))
    trainer = framework.Trainer(max_epochs=3, accelerator="cpu", devices=2, strategy=strategy, default_root_dir=work,
                                logger=[CSVLogger(work, name="logs", version=0),
                                        TensorBoardLogger(work, name="tensorboard", version=0)], log_every_n_steps=1,
                                accumulate_grad_batches=2, enable_progress_bar=False, enable_model_summary=False,
                                callbacks=callbacks)
    model = Noisy()
    trainer.fit(model, data(workers, work), data(0))
    if trainer.is_global_zero:
        optimizer = trainer.optimizers[0].state_dict() if trainer.optimizers else None  # not where ranks were forked
        torch.save({"weights": model.state_dict(), "optimizer": optimizer, "global_step": trainer.global_step},
                   work / "result.pt")


if __name__ == "__main__":
    main(*sys.argv[1:3])
