"""RichProgressBar: rich bars on a terminal (the real rich, drawing into a string), lines elsewhere."""

from __future__ import annotations

import io
import re
import sys

import pytest

from framework.callbacks import RichProgressBar, RichProgressBarTheme
from framework.errors import MisconfigurationError, MissingPackageError
from tests.callbacks.test_progress import ShowsLoss
from tests.helpers import Regressor, loader, quiet_trainer

pytest.importorskip("rich", reason="the dev extra installs rich")


def terminal(**kwargs) -> dict:
    return dict(file=io.StringIO(), force_terminal=True, width=160, color_system=None, **kwargs)


class Watched(RichProgressBar):
    """Notes the bars' tasks while training runs and what is on the screen when it ends."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seen = {}

    def on_validation_batch_end(self, trainer, pl_module, *args, **kwargs):
        super().on_validation_batch_end(trainer, pl_module, *args, **kwargs)
        self.seen.update(both=(self.train_progress_bar_id, self.val_progress_bar_id))

    def on_train_end(self, trainer, pl_module):
        self.seen.update(shown=[task.description for task in self.progress.tasks])
        super().on_train_end(trainer, pl_module)


def test_on_a_terminal_it_draws_the_counts_times_speed_and_metrics():
    bar = Watched(console_kwargs=terminal())
    trainer = quiet_trainer(max_epochs=2, callbacks=[bar], enable_progress_bar=True, num_sanity_val_steps=0)
    trainer.fit(ShowsLoss(), loader(n=64), loader(n=16))  # 8 training batches, 2 validation batches
    screen = bar._console.file.getvalue()
    last_line = re.findall(r"Epoch 1 .*8/8 .*\d:\d\d:\d\d • \d:\d\d:\d\d .*it/s .*", screen)[-1]
    assert re.search(r"train_loss: \d+\.\d{3}", last_line) and re.search(r"val_loss: \d+\.\d{3}", last_line)
    assert "Validation" in screen and "2/2" in screen
    train_task, val_task = bar.seen["both"]
    assert train_task is not None and val_task is not None and train_task != val_task
    assert bar.seen["shown"] == ["Epoch 1"]  # leave=False: one training bar, the validation bar gone
    assert bar.progress is None and bar.train_progress_bar_id is None  # stopped when fit ended


def test_leave_keeps_each_epochs_bar_and_the_theme_formats_the_metrics():
    bar = Watched(leave=True, console_kwargs=terminal(),
                  theme=RichProgressBarTheme(metrics_format=".1e", metrics_text_delimiter=" | "))
    trainer = quiet_trainer(max_epochs=3, callbacks=[bar], enable_progress_bar=True, limit_val_batches=0)
    trainer.fit(ShowsLoss(), loader(n=64))
    assert bar.seen["shown"] == ["Epoch 0", "Epoch 1", "Epoch 2"]
    assert re.search(r"train_loss: \d\.\de[-+]\d\d", bar._console.file.getvalue())


def test_test_and_predict_have_bars_of_their_own():
    bar = RichProgressBar(console_kwargs=terminal())
    trainer = quiet_trainer(callbacks=[bar], enable_progress_bar=True)
    trainer.test(Regressor(), loader(n=24), verbose=False)
    trainer.predict(Regressor(), loader(n=40))
    screen = bar._console.file.getvalue()
    assert re.search(r"Testing .*3/3", screen) and re.search(r"Predicting .*5/5", screen)


def test_without_a_terminal_it_prints_one_line_per_epoch():
    written = io.StringIO()
    trainer = quiet_trainer(max_epochs=2, callbacks=[RichProgressBar(console_kwargs={"file": written})],
                            enable_progress_bar=True)
    trainer.fit(ShowsLoss(), loader(), loader(n=16))
    lines = written.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == ["Epoch 0", "Epoch 1"]
    assert all("train_loss=" in line and "val_loss=" in line for line in lines)


def test_a_crash_stops_the_drawing():
    class Fails(Regressor):
        def training_step(self, batch, batch_idx):
            if batch_idx == 2:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    bar = RichProgressBar(console_kwargs=terminal())
    with pytest.raises(RuntimeError, match="boom"):
        quiet_trainer(max_epochs=1, callbacks=[bar], enable_progress_bar=True).fit(Fails(), loader())
    assert bar.progress is None


def test_bad_arguments_and_a_missing_rich_are_named(monkeypatch):
    with pytest.raises(MisconfigurationError, match=r"RichProgressBar\(refresh_rate=-2"):
        RichProgressBar(refresh_rate=-2)
    with pytest.raises(MisconfigurationError, match=r"enable_progress_bar=False.*RichProgressBar"):
        quiet_trainer(enable_progress_bar=False, callbacks=[RichProgressBar()])
    monkeypatch.setitem(sys.modules, "rich", None)
    with pytest.raises(MissingPackageError, match=r'RichProgressBar needs rich.*pip install "framework\[rich\]"'):
        RichProgressBar()
