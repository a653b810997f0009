"""Each limit / interval / stopping flag, checked by counting steps, validation runs and batches seen."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import torch

import framework
from framework.callbacks import Timer
from tests.helpers import RecordingLogger, Regressor, loader, quiet_trainer


class Counting(Regressor):
    """Records (epoch, batch_idx) of every training batch and where each validation ran."""

    def __init__(self):
        super().__init__()
        self.train_batches: list[tuple[int, int]] = []
        self.validations: list[tuple[int, int]] = []  # (epoch, last training batch before it)
        self.val_batches = 0
        self.val_runs = 0

    def training_step(self, batch, batch_idx):
        self.train_batches.append((self.current_epoch, batch_idx))
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        self.val_batches += 1
        return super().validation_step(batch, batch_idx)

    def on_validation_start(self):
        self.val_runs += 1
        if not self.trainer.sanity_checking:
            self.validations.append(self.train_batches[-1])


def fit(model=None, train_n=80, val_n=32, **kwargs):
    model = model or Counting()
    kwargs.setdefault("num_sanity_val_steps", 0)
    trainer = quiet_trainer(**kwargs)
    trainer.fit(model, loader(n=train_n), loader(n=val_n))
    return trainer, model


def test_limit_train_batches_int_and_fraction():
    trainer, model = fit(max_epochs=2, limit_train_batches=3)
    assert trainer.num_training_batches == 3 and trainer.global_step == 6
    trainer, model = fit(max_epochs=1, limit_train_batches=0.5)
    assert trainer.num_training_batches == 5 and len(model.train_batches) == 5


def test_limit_val_batches_and_zero_disables_validation():
    trainer, model = fit(max_epochs=2, limit_val_batches=2)
    assert trainer.num_val_batches == [2] and model.val_batches == 4
    trainer, model = fit(max_epochs=2, limit_val_batches=0)
    assert model.val_runs == 0


def test_limit_train_batches_zero_trains_nothing():
    trainer, model = fit(max_epochs=2, limit_train_batches=0)
    assert trainer.global_step == 0 and model.train_batches == []


def test_val_check_interval_fraction_validates_inside_the_epoch():
    _, model = fit(max_epochs=1, val_check_interval=0.3)  # 10 batches -> every 3 batches
    assert model.validations == [(0, 2), (0, 5), (0, 8)]
    _, model = fit(max_epochs=1, val_check_interval=0.5)
    assert model.validations == [(0, 4), (0, 9)]


def test_val_check_interval_int_counts_within_each_epoch():
    _, model = fit(max_epochs=2, val_check_interval=4)
    assert model.validations == [(0, 3), (0, 7), (1, 3), (1, 7)]


def test_val_check_interval_int_across_epochs_without_epoch_checks():
    _, model = fit(max_epochs=2, val_check_interval=4, check_val_every_n_epoch=None)
    assert model.validations == [(0, 3), (0, 7), (1, 1), (1, 5), (1, 9)]


def test_check_val_every_n_epoch():
    _, model = fit(max_epochs=4, check_val_every_n_epoch=2)
    assert model.validations == [(1, 9), (3, 9)]


def test_sanity_check_runs_before_training_and_logs_nothing():
    logger = RecordingLogger()
    model = Counting()
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=2, limit_train_batches=1, logger=logger)
    trainer.fit(model, loader(n=80), loader(n=32))
    assert model.val_batches == 2 + 4
    assert logger.steps_with("val_loss") == [0]


def test_num_sanity_val_steps_minus_one_runs_every_val_batch():
    model = Counting()
    quiet_trainer(max_epochs=1, limit_train_batches=0, num_sanity_val_steps=-1).fit(model, loader(), loader(n=32))
    assert model.val_batches == 4


def test_max_steps_stops_mid_epoch_and_a_due_validation_still_runs():
    trainer, model = fit(max_epochs=5, max_steps=15, val_check_interval=0.5)
    assert trainer.global_step == 15 and len(model.train_batches) == 15
    assert model.validations[-1] == (1, 4)
    assert trainer.current_epoch == 2  # the stopped epoch counts as run, as in Lightning


def test_max_epochs_and_current_epoch_afterwards():
    trainer, _ = fit(max_epochs=3)
    assert trainer.current_epoch == 3 and trainer.global_step == 30


def test_should_stop_waits_for_min_epochs_and_min_steps():
    class StopsAtOnce(Counting):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            self.trainer.should_stop = True

    trainer, model = fit(StopsAtOnce(), max_epochs=10, min_epochs=2)
    assert trainer.current_epoch == 2 and trainer.global_step == 20  # epochs 0 and 1 run whole
    trainer, model = fit(StopsAtOnce(), max_epochs=10, min_steps=5)
    assert trainer.global_step == 5


def test_max_time_stops_training():
    class Slow(Counting):
        def training_step(self, batch, batch_idx):
            time.sleep(0.02)
            return super().training_step(batch, batch_idx)

    trainer, model = fit(Slow(), max_time={"seconds": 0.3}, limit_val_batches=0)
    assert 3 <= trainer.global_step < 40
    assert trainer.max_epochs == trainer.epoch_limit == -1  # no epoch limit: the time bounds the run


def test_max_time_is_a_timer_in_the_callbacks_that_a_resumed_run_counts_on_from(tmp_path, caplog):
    trainer = framework.Trainer(accelerator="cpu", max_time={"hours": 1}, logger=False, enable_progress_bar=False,
                                enable_model_summary=False, max_epochs=1, default_root_dir=tmp_path)
    timer = [callback for callback in trainer.callbacks if isinstance(callback, Timer)]
    assert len(timer) == 1 and timer[0].time_remaining() == 3600  # as Lightning's trainer.callbacks holds it
    trainer.fit(Counting(), loader())
    spent = timer[0].time_elapsed("train")
    trainer.save_checkpoint(tmp_path / "one.ckpt")

    resumed = quiet_trainer(max_time={"hours": 1}, max_epochs=2)
    resumed.fit(Counting(), loader(), ckpt_path=tmp_path / "one.ckpt")
    again = next(callback for callback in resumed.callbacks if isinstance(callback, Timer))
    assert again.time_elapsed("train") > spent  # the first run's time counts: max_time bounds the whole training

    own = Timer(duration={"minutes": 5})
    with caplog.at_level("INFO", logger="framework"):
        trainer = quiet_trainer(max_time={"hours": 1}, callbacks=[own])
    assert [c for c in trainer.callbacks if isinstance(c, Timer)] == [own]
    assert any("Ignoring `Trainer(max_time=...)`" in message for message in caplog.messages)


@pytest.mark.parametrize("max_time", ["00:00:00:00", timedelta(0), 0])
@pytest.mark.parametrize(("minimum", "steps"), [({}, 0), ({"min_steps": 3}, 3), ({"min_epochs": 1}, 10)])
def test_a_max_time_of_zero_stops_at_the_first_check_once_the_minimums_are_met(max_time, minimum, steps):
    trainer, _ = fit(Counting(), max_time=max_time, limit_val_batches=0, **minimum)
    assert trainer.global_step == steps


def test_on_train_batch_start_returning_minus_one_ends_the_epoch():
    class EndsEarly(Counting):
        def on_train_batch_start(self, batch, batch_idx):
            return -1 if batch_idx == 4 else None

    trainer, model = fit(EndsEarly(), max_epochs=2, limit_val_batches=0)
    assert model.train_batches == [(0, i) for i in range(4)] + [(1, i) for i in range(4)]


@pytest.mark.parametrize(("value", "batches"), [(True, 1), (3, 3)])
def test_fast_dev_run(value, batches):
    logger = RecordingLogger()
    model = Counting()
    trainer = quiet_trainer(fast_dev_run=value, logger=logger, max_epochs=10)
    trainer.fit(model, loader(n=80), loader(n=32))
    assert trainer.global_step == batches and model.val_batches == batches
    assert trainer.current_epoch == 1
    # As in Lightning, a DummyLogger stands in for the real one: nothing reaches it, but self.logger works.
    assert logger.calls == [] and [type(lg).__name__ for lg in trainer.loggers] == ["DummyLogger"]
    trainer.logger.experiment.add_scalar("anything", 1.0)
    assert quiet_trainer(fast_dev_run=value, logger=False).loggers == []
    tested = []
    model.test_step = lambda batch, batch_idx: tested.append(batch_idx)
    trainer.test(model, loader(n=80), verbose=False)
    assert len(tested) == batches


def test_overfit_batches_repeats_the_same_unshuffled_batches():
    seen = []

    class Records(Regressor):
        def training_step(self, batch, batch_idx):
            seen.append(batch[0].clone())
            return super().training_step(batch, batch_idx)

    trainer = quiet_trainer(max_epochs=3, overfit_batches=2, num_sanity_val_steps=0)
    trainer.fit(Records(), loader(shuffle=True), loader(n=32))
    assert trainer.num_training_batches == 2 and trainer.num_val_batches == [2]
    assert len(seen) == 6
    first_epoch = seen[:2]
    assert all(torch.equal(a, b) for a, b in zip(first_epoch * 2, seen[2:]))
    unshuffled = next(iter(loader()))[0]
    assert torch.equal(seen[0], unshuffled)


def test_reload_dataloaders_every_n_epochs_calls_the_loader_method_again():
    class Reloads(Regressor):
        def __init__(self):
            super().__init__()
            self.loads = 0

        def train_dataloader(self):
            self.loads += 1
            return loader()

    model = Reloads()
    quiet_trainer(max_epochs=4, reload_dataloaders_every_n_epochs=2).fit(model)
    assert model.loads == 2
    model = Reloads()
    quiet_trainer(max_epochs=4).fit(model)
    assert model.loads == 1


def test_estimated_stepping_batches():
    trainer, _ = fit(max_epochs=2, accumulate_grad_batches=3, limit_val_batches=0)
    assert trainer.estimated_stepping_batches == 8
    trainer, _ = fit(max_steps=5, limit_val_batches=0)
    assert trainer.estimated_stepping_batches == 5


def test_an_iterable_without_length_works_and_ends_on_its_last_batch():
    class Stream:
        def __iter__(self):
            yield from loader(n=40)

    model = Counting()
    trainer = quiet_trainer(max_epochs=2, accumulate_grad_batches=2, num_sanity_val_steps=0)
    trainer.fit(model, Stream(), loader(n=16))
    assert trainer.num_training_batches == float("inf")
    assert trainer.global_step == 2 * 3  # 5 batches: steps after 2, 4 and the last
    assert model.validations == [(0, 4), (1, 4)]


def test_several_validation_loaders_and_their_counts():
    class Two(Regressor):
        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val_loss", self.loss(batch))

    trainer = quiet_trainer(max_epochs=1, limit_val_batches=3)
    trainer.fit(Two(), loader(), [loader(n=16), loader(n=64)])
    assert trainer.num_val_batches == [2, 3]
    assert {"val_loss/dataloader_idx_0", "val_loss/dataloader_idx_1"} <= set(trainer.callback_metrics)


def test_deterministic_flag_turns_on_deterministic_algorithms():
    try:
        framework.Trainer(accelerator="cpu", deterministic=True, logger=False)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_estimated_stepping_batches_is_known_inside_configure_optimizers_and_capped_by_epochs():
    seen = []

    class OneCycle(Regressor):
        def configure_optimizers(self):
            seen.append(self.trainer.estimated_stepping_batches)
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            cycle = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=seen[-1])
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": cycle, "interval": "step"}}

    trainer = quiet_trainer(max_epochs=2, accumulate_grad_batches=3)
    trainer.fit(OneCycle(), loader(n=80))  # 10 batches -> 4 steps an epoch
    assert seen == [8] and trainer.global_step == 8
    trainer = quiet_trainer(max_epochs=1, max_steps=1000)
    trainer.fit(Regressor(), loader())
    assert trainer.estimated_stepping_batches == 8 == trainer.global_step
