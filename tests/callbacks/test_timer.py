"""Timer: stage times, stopping after a duration, and its state across a resume."""

from __future__ import annotations

import time

import pytest

from framework.callbacks import Timer
from framework.errors import MisconfigurationError
from tests.helpers import Regressor, loader, quiet_trainer


class Slow(Regressor):
    def training_step(self, batch, batch_idx):
        time.sleep(0.02)
        return super().training_step(batch, batch_idx)


def test_it_stops_training_after_the_duration():
    timer = Timer(duration={"seconds": 0.1})
    trainer = quiet_trainer(max_epochs=100, callbacks=[timer])
    trainer.fit(Slow(), loader())
    assert 0.1 <= timer.time_elapsed("train") < 2 and trainer.global_step < 100 * 8
    assert trainer.current_epoch < 2


def test_with_interval_epoch_it_finishes_the_epoch():
    trainer = quiet_trainer(max_epochs=100, callbacks=[Timer(duration={"seconds": 0.05}, interval="epoch")])
    trainer.fit(Slow(), loader())
    assert trainer.global_step == 8 and trainer.current_epoch == 1


def test_each_stage_is_timed():
    timer = Timer()
    trainer = quiet_trainer(max_epochs=1, callbacks=[timer])
    trainer.fit(Slow(), loader(), loader(n=16))
    trainer.test(Regressor(), loader(), verbose=False)
    assert timer.time_elapsed("train") >= 8 * 0.02
    assert 0 < timer.time_elapsed("validate") < timer.time_elapsed("train")
    assert 0 < timer.time_elapsed("sanity_check") and timer.end_time("sanity_check") < timer.start_time("train")
    assert timer.time_elapsed("test") > 0 and timer.time_elapsed("predict") == 0
    assert timer.start_time("predict") is None and timer.end_time("train") is not None
    assert timer.time_remaining() is None


def test_state_carries_the_elapsed_training_time_into_a_resumed_run(tmp_path):
    timer = Timer(duration="00:00:00:01")
    trainer = quiet_trainer(max_epochs=1, callbacks=[timer])
    trainer.fit(Slow(), loader())
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    resumed = Timer(duration="00:00:00:01")
    resumed.load_state_dict(timer.state_dict())
    assert resumed.time_elapsed("train") == pytest.approx(timer.time_elapsed("train"))
    assert set(timer.state_dict()["time_elapsed"]) == {"train", "sanity_check", "validate", "test", "predict"}


@pytest.mark.parametrize("duration", [0, "00:00:00:00", {"seconds": 0}])
@pytest.mark.parametrize(("minimum", "steps"), [({}, 0), ({"min_steps": 3}, 3)])
def test_a_duration_of_zero_stops_at_the_first_check_once_the_minimums_are_met(duration, minimum, steps):
    trainer = quiet_trainer(max_epochs=5, callbacks=[Timer(duration=duration)], limit_val_batches=0, **minimum)
    trainer.fit(Regressor(), loader())
    assert trainer.global_step == steps


def test_bad_arguments():
    with pytest.raises(MisconfigurationError, match=r"Timer\(duration='1 hour'"):
        Timer(duration="1 hour")
    with pytest.raises(MisconfigurationError, match=r"Timer\(interval='batch'"):
        Timer(interval="batch")
    with pytest.raises(MisconfigurationError, match=r"stage='fit'"):
        Timer().time_elapsed("fit")
