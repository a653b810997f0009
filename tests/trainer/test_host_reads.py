"""A training step reads no tensor value on the host beyond what the same plain PyTorch loop reads.

On a GPU each read (``.item()``, ``bool(tensor)`` ...) waits for the device; counted on the
CPU, the calls are the same. Steady-state steps are compared: not the first (which sets
things up) and none that hands logged values to the loggers (every ``log_every_n_steps``).
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import framework
from framework.testing import count_host_reads
from tests.helpers import quiet_trainer

STEPS = 24
TRUE_DTYPES = {"bf16-true": torch.bfloat16, "16-true": torch.float16, "64-true": torch.float64}


def steady(per_step: list[int]) -> list[int]:
    """The counts of the steady-state steps: not the first ones, not the last (the epoch's end)."""
    return per_step[3:-2]


class Logging(framework.Module):
    """A classifier logging on every step, as most Modules do (on step, on epoch, to the progress bar)."""

    def __init__(self, optimizer: str = "adam", fused: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
        self.optimizer, self.fused = optimizer, fused

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        loss = nn.functional.cross_entropy(logits, y)
        self.log("loss", loss, prog_bar=True)
        self.log("acc", (logits.argmax(1) == y).float().mean(), on_epoch=True)
        return loss

    def configure_optimizers(self):
        return make_optimizer(self.optimizer, self.parameters(), self.fused)


def make_optimizer(kind: str, parameters, fused: bool) -> torch.optim.Optimizer:
    if kind == "adam":
        return torch.optim.Adam(parameters, lr=1e-3, fused=fused or None)
    return torch.optim.SGD(parameters, lr=0.1, momentum=0.9, fused=fused or None)


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(16, 8, generator=generator), torch.randint(0, 3, (16,), generator=generator))
            for _ in range(STEPS)]


class ReadsPerStep(framework.Callback):
    """Counts the host reads of each training batch (from one batch's start to the next one's) in this process."""

    def __init__(self, report_to: str | None = None) -> None:
        self.report_to = report_to
        self.per_step: list[int] = []

    def on_train_start(self, trainer, module):
        self._counting = count_host_reads()
        self._reads = self._counting.__enter__()
        self._last = None

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if self._last is not None:
            self.per_step.append(self._reads.total - self._last)
        self._last = self._reads.total

    def on_exception(self, trainer, module, exception):
        self._counting.__exit__(None, None, None)  # torch's own methods back for the tests that follow

    def on_train_end(self, trainer, module):
        self._counting.__exit__(None, None, None)
        if self.report_to is not None:
            with open(f"{self.report_to}.rank{trainer.global_rank}", "w") as report:
                json.dump(self.per_step, report)


def plain_loop_reads(precision: str, optimizer: str, fused: bool) -> list[int]:
    """Host reads per step of the hand-written loop: autocast, GradScaler for fp16, the same optimizer."""
    model = Logging().to(TRUE_DTYPES.get(precision, torch.float32))
    opt = make_optimizer(optimizer, model.parameters(), fused)
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler("cpu", enabled=precision == "16-mixed")
    per_step, last = [], None
    with count_host_reads() as reads:
        for x, y in batches():
            if last is not None:
                per_step.append(reads.total - last)
            last = reads.total
            x = x.to(TRUE_DTYPES.get(precision, torch.float32))
            with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
                loss = nn.functional.cross_entropy(model.net(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    return per_step


@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true"])
def test_a_step_reads_no_more_than_the_plain_loop(precision, fused, tmp_path):
    counted = ReadsPerStep()
    trainer = quiet_trainer(max_epochs=1, precision=precision, callbacks=[counted], log_every_n_steps=50,
                            logger=framework.loggers.CSVLogger(tmp_path))
    trainer.fit(Logging("adam", fused), batches())
    plain = plain_loop_reads(precision, "adam", fused)
    assert steady(counted.per_step) == steady(plain)
    if fused:  # the fused optimizer takes GradScaler's flag itself: nothing is read at all
        assert set(steady(counted.per_step)) == {0}


def test_an_fp16_step_with_a_scheduler_stepping_each_step_reads_only_what_the_scaler_reads():
    class Scheduled(Logging):
        def configure_optimizers(self):
            optimizer = super().configure_optimizers()
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.99)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    counted = ReadsPerStep()
    quiet_trainer(max_epochs=1, precision="16-mixed", callbacks=[counted]).fit(Scheduled("sgd"), batches())
    assert steady(counted.per_step) == steady(plain_loop_reads("16-mixed", "sgd", False))


@pytest.mark.parametrize("precision", ["32-true", "16-mixed"])
@pytest.mark.parametrize("strategy", ["ddp", "zero1", "zero2", "zero3"])
def test_no_strategy_adds_a_read_to_the_step(strategy, precision, tmp_path):
    report = str(tmp_path / "reads")
    trainer = quiet_trainer(devices=2, strategy=strategy, max_epochs=1, precision=precision,
                            callbacks=[ReadsPerStep(report)], log_every_n_steps=50)
    trainer.fit(Logging("sgd"), batches())
    plain = set(steady(plain_loop_reads(precision, "sgd", False)))
    assert len(plain) == 1  # the same every step
    for rank in (0, 1):  # each rank runs half the batches
        with open(f"{report}.rank{rank}") as counts:
            assert set(steady(json.load(counts))) == plain, f"rank {rank}"


def test_count_host_reads_counts_each_way_of_reading_a_value_and_puts_torch_back():
    value = torch.tensor([2.0])
    with count_host_reads() as reads:
        value.item(), value.tolist(), value.cpu(), value.numpy(), bool(value), float(value), int(value)
        value + 1  # arithmetic reads nothing
    assert reads.total == 7
    assert reads.by_method["item"] == 1 and reads.by_method["__bool__"] == 1
    assert "item" not in vars(torch.Tensor)  # inherited from torch's C base class again, as before


def test_handing_the_logged_values_to_the_loggers_reads_them_in_one_go(tmp_path):
    counted = ReadsPerStep()
    trainer = quiet_trainer(max_epochs=1, callbacks=[counted], log_every_n_steps=1,
                            logger=framework.loggers.CSVLogger(tmp_path))
    trainer.fit(Logging("sgd"), batches())  # logs "loss" and "acc_step" on every step, all flushed every step
    assert set(steady(counted.per_step)) == {1}  # the plain loop reads nothing with SGD
    logged = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text().splitlines()
    assert len(logged) > STEPS and logged[0].split(",")[:3] == ["acc_epoch", "acc_step", "epoch"]
