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


_ON_A_TERMINAL = """
import torch
from tests.helpers import Regressor, loader
import framework

trainer = framework.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False,
                            enable_model_summary=False)
trainer.fit(Regressor(), loader(), loader())
print("printed after fit")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="runs the script on a pseudo-terminal")
def test_on_a_terminal_what_follows_the_bars_starts_on_a_line_of_its_own():
    """What the framework says at the end ("`Trainer.fit` stopped ...") and what the user prints after fit used to
    land at the end of the bar's line, where the terminal's cursor waits."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 150, 0, 0))  # a 150-column terminal
    process = subprocess.Popen([sys.executable, "-c", _ON_A_TERMINAL], stdin=child, stdout=child, stderr=child,
                               cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    os.close(child)
    screen = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child side closed
            break
        if not chunk:
            break
        screen += chunk
    assert process.wait(timeout=120) == 0, screen.decode(errors="replace")[-2000:]
    text = screen.decode(errors="replace")
    for said in ("`Trainer.fit` stopped", "printed after fit"):
        at = text.index(said)
        assert text[at - 1] in "\r\n", repr(text[max(at - 80, 0):at + 40])
    assert "Epoch 1: 100%" in text[text.index("`Trainer.fit` stopped"):]  # the last epoch's bar stays on screen


class Reads(TQDMProgressBar):
    """Reads, in the hooks Lightning code reads them in, what a Lightning progress bar offers."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, object] = {}

    def on_train_epoch_start(self, trainer, module):
        super().on_train_epoch_start(trainer, module)
        self.seen.update(trainer=self.trainer is trainer, train=self.total_train_batches,
                         train_bar=self.train_progress_bar.total)

    def on_validation_start(self, trainer, module):
        super().on_validation_start(trainer, module)
        self.seen["sanity" if trainer.sanity_checking else "val"] = self.total_val_batches
        self.seen["val_bar"] = self.val_progress_bar.total

    def on_test_start(self, trainer, module):
        super().on_test_start(trainer, module)
        self.seen.update(test=self.total_test_batches, test_bar=self.test_progress_bar.total)

    def on_predict_start(self, trainer, module):
        super().on_predict_start(trainer, module)
        self.seen.update(predict=self.total_predict_batches, predict_bar=self.predict_progress_bar.total)


def test_total_val_batches_is_zero_in_the_epochs_that_do_not_validate():
    class PerEpoch(TQDMProgressBar):
        def __init__(self):
            super().__init__()
            self.totals = []

        def on_train_epoch_end(self, trainer, pl_module):
            self.totals.append(self.total_val_batches)

    bar = PerEpoch()
    trainer = quiet_trainer(max_epochs=4, callbacks=[bar], check_val_every_n_epoch=2, num_sanity_val_steps=0,
                            enable_progress_bar=True)
    trainer.fit(Regressor(), loader(n=64), loader(n=16))
    assert bar.totals == [0, 2, 0, 2]  # as Lightning's bar counts them


def test_the_bar_offers_lightnings_counts_and_bars(monkeypatch):
    bar = Reads()
    with pytest.raises(TypeError, match="set in setup"):
        bar.trainer  # noqa: B018 - not attached yet
    monkeypatch.setattr(sys, "stdout", FakeTerminal())
    trainer = quiet_trainer(max_epochs=1, callbacks=[bar], enable_progress_bar=True, num_sanity_val_steps=1)
    trainer.fit(Regressor(), loader(n=64), loader(n=24))  # 8 training batches, 3 validation batches
    trainer.test(Regressor(), loader(n=16))
    trainer.predict(Regressor(), loader(n=40))
    monkeypatch.undo()
    assert bar.seen == {"trainer": True, "train": 8, "train_bar": 8, "sanity": 1, "val": 3, "val_bar": 3, "test": 2,
                        "test_bar": 2, "predict": 5, "predict_bar": 5}
    with pytest.raises(TypeError, match="train_progress_bar does not exist now"):
        bar.train_progress_bar  # noqa: B018 - closed after fit
