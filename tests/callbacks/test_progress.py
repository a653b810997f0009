"""The progress bar: one line per epoch when stdout is not a terminal, throttled tqdm bars when it is."""

from __future__ import annotations

import io
import re
import sys
import time

import pytest

from framework.callbacks import TQDMProgressBar
from framework.errors import MisconfigurationError
from tests.helpers import Regressor, loader, quiet_trainer


class ShowsLoss(Regressor):
    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.loss(batch), prog_bar=True)


def test_without_a_terminal_it_prints_one_line_per_epoch_and_per_run(capsys):
    trainer = quiet_trainer(max_epochs=3, enable_progress_bar=True)
    trainer.fit(ShowsLoss(), loader(), loader(n=16))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    for epoch, line in enumerate(lines):
        assert re.fullmatch(rf"Epoch {epoch}: 8 batches in [0-9.]+s, train_loss=[0-9.e-]+, val_loss=[0-9.e-]+", line)
    trainer.test(ShowsLoss(), loader(n=24), verbose=False)
    trainer.validate(ShowsLoss(), loader(n=16), verbose=False)
    trainer.predict(ShowsLoss(), loader(n=16))
    assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines()] == [
        "Testing", "Validation", "Predicting"]


def test_the_logger_version_is_shown_as_v_num(capsys):
    from framework.loggers import CSVLogger

    quiet_trainer(max_epochs=1, enable_progress_bar=True, logger=CSVLogger("logs", version=7)).fit(
        Regressor(), loader())
    assert "v_num=7" in capsys.readouterr().out


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


class SlowSteps(ShowsLoss):
    def training_step(self, batch, batch_idx):
        time.sleep(0.11)  # slower than the bar's ten redraws a second
        return super().training_step(batch, batch_idx)


def redraws(monkeypatch, model, rate):
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    trainer = quiet_trainer(max_epochs=1, callbacks=[TQDMProgressBar(refresh_rate=rate)], enable_progress_bar=True,
                            limit_val_batches=0)
    trainer.fit(model, loader(n=64))  # 8 batches
    monkeypatch.undo()
    text = terminal.getvalue()
    assert "8/8" in text and "train_loss=" in text
    return len(re.findall(r"train_loss=", text))


def test_on_a_terminal_the_bar_is_redrawn_every_refresh_rate_batches(monkeypatch):
    every_batch, every_fourth = redraws(monkeypatch, SlowSteps(), 1), redraws(monkeypatch, SlowSteps(), 4)
    assert every_fourth < every_batch and every_batch >= 8


def test_a_fast_loop_is_redrawn_at_most_ten_times_a_second(monkeypatch):
    assert redraws(monkeypatch, ShowsLoss(), 1) <= 4  # 8 fast batches: the first, the last, little between


def test_refresh_rate_zero_shows_nothing(capsys):
    quiet_trainer(max_epochs=1, callbacks=[TQDMProgressBar(refresh_rate=0)], enable_progress_bar=True).fit(
        Regressor(), loader())
    assert capsys.readouterr().out == ""


def test_the_trainer_adds_one_bar_and_refuses_contradictions():
    assert isinstance(quiet_trainer(enable_progress_bar=True).progress_bar_callback, TQDMProgressBar)
    assert quiet_trainer(enable_progress_bar=False).progress_bar_callback is None
    with pytest.raises(MisconfigurationError, match=r"enable_progress_bar=False.*TQDMProgressBar"):
        quiet_trainer(enable_progress_bar=False, callbacks=[TQDMProgressBar()])
    with pytest.raises(MisconfigurationError, match="2 progress bar callbacks"):
        quiet_trainer(enable_progress_bar=True, callbacks=[TQDMProgressBar(), TQDMProgressBar()])
    with pytest.raises(MisconfigurationError, match=r"refresh_rate=-1"):
        TQDMProgressBar(refresh_rate=-1)
