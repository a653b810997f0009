"""Every form ``configure_optimizers`` may return, and when each kind of scheduler steps."""

from __future__ import annotations

import pytest
import torch

from framework.errors import MisconfigurationError
from framework.trainer.optimizers import parse_optimizers
from tests.helpers import Regressor, loader, quiet_trainer


def _parts(module: Regressor):
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)


def test_each_accepted_form_is_parsed():
    module = Regressor()
    optimizer, scheduler = _parts(module)
    other = torch.optim.Adam(module.parameters())
    assert parse_optimizers(optimizer) == ([optimizer], [])
    assert parse_optimizers([optimizer, other]) == ([optimizer, other], [])
    assert parse_optimizers((optimizer,)) == ([optimizer], [])
    optimizers, configs = parse_optimizers(([optimizer], [scheduler]))
    assert optimizers == [optimizer] and configs[0].scheduler is scheduler and configs[0].interval == "epoch"
    optimizers, configs = parse_optimizers({"optimizer": optimizer, "lr_scheduler": scheduler})
    assert configs[0].scheduler is scheduler
    optimizers, configs = parse_optimizers({"optimizer": optimizer, "lr_scheduler": {
        "scheduler": scheduler, "interval": "step", "frequency": 3, "name": "lr"}})
    assert (configs[0].interval, configs[0].frequency, configs[0].name) == ("step", 3, "lr")
    optimizers, configs = parse_optimizers([{"optimizer": optimizer, "lr_scheduler": scheduler}, {"optimizer": other}])
    assert optimizers == [optimizer, other] and len(configs) == 1
    assert parse_optimizers(None) == ([], [])


@pytest.mark.parametrize("returned", ["adam", 3, [], {"lr_scheduler": None}, ([], []), [object()]])
def test_unknown_forms_raise_with_the_accepted_forms(returned):
    with pytest.raises(MisconfigurationError, match="configure_optimizers returned .* accepted|may return"):
        parse_optimizers(returned)


def test_bad_scheduler_config_is_named():
    module = Regressor()
    optimizer, scheduler = _parts(module)
    with pytest.raises(MisconfigurationError, match="interval='batch'"):
        parse_optimizers({"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "batch"}})
    with pytest.raises(MisconfigurationError, match="needs a 'scheduler' key"):
        parse_optimizers({"optimizer": optimizer, "lr_scheduler": {"sched": scheduler}})


def test_unknown_config_keys_are_refused_naming_the_likely_key():
    # Lightning warns and trains on, so a typo silently keeps the default schedule; we stop at once.
    module = Regressor()
    optimizer, scheduler = _parts(module)
    with pytest.raises(MisconfigurationError, match=r"LR scheduler config has unknown keys 'intervall' \(did you "
                                                     r"mean 'interval'\?\)"):
        parse_optimizers({"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "intervall": "step"}})
    # Lightning 1.x's "reduce_on_plateau" key is still accepted (the scheduler's type decides it).
    scheduler_dict = {"scheduler": scheduler, "reduce_on_plateau": False}
    assert parse_optimizers({"optimizer": optimizer, "lr_scheduler": scheduler_dict})[1][0].scheduler is scheduler
    with pytest.raises(MisconfigurationError, match=r"optimizer dict has unknown keys 'lr_sheduler' \(did you mean "
                                                     r"'lr_scheduler'\?\)"):
        parse_optimizers({"optimizer": optimizer, "lr_sheduler": scheduler})


class Scheduled(Regressor):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.lrs: list[float] = []

    def training_step(self, batch, batch_idx):
        self.lrs.append(self.optimizers().param_groups[0]["lr"])
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
        return {"optimizer": optimizer, "lr_scheduler": {
            "scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5), **self.config}}


def test_epoch_scheduler_steps_once_per_epoch():
    model = Scheduled({})
    quiet_trainer(max_epochs=3, limit_train_batches=2).fit(model, loader())
    assert model.lrs == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]


def test_step_scheduler_with_frequency():
    model = Scheduled({"interval": "step", "frequency": 2})
    quiet_trainer(max_epochs=1, limit_train_batches=6).fit(model, loader())
    assert model.lrs == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]


def test_step_scheduler_counts_optimizer_steps_not_batches():
    model = Scheduled({"interval": "step"})
    quiet_trainer(max_epochs=1, limit_train_batches=4, accumulate_grad_batches=2).fit(model, loader())
    assert model.lrs == [1.0, 1.0, 0.5, 0.5]


def test_reduce_on_plateau_reads_the_monitored_metric():
    class Plateau(Regressor):
        def validation_step(self, batch, batch_idx):
            self.log("flat", 1.0)

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.1)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "flat"}}

    model = Plateau()
    trainer = quiet_trainer(max_epochs=3, limit_train_batches=1, num_sanity_val_steps=0)
    trainer.fit(model, loader(), loader(n=16))
    # Epoch 0 sets the best value; each later epoch without improvement cuts the LR tenfold.
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.01)
    assert trainer.lr_scheduler_configs[0].reduce_on_plateau


def test_module_helpers_return_single_objects_or_lists():
    model = Scheduled({})
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=1)
    trainer.fit(model, loader())
    assert model.optimizers() is trainer.optimizers[0]
    assert model.lr_schedulers() is trainer.lr_scheduler_configs[0].scheduler


def test_manual_optimization_leaves_scheduler_stepping_to_the_user():
    class Manual(Scheduled):
        def __init__(self):
            super().__init__({})
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            self.lrs.append(self.optimizers().param_groups[0]["lr"])
            self.manual_backward(self.loss(batch), retain_graph=False)
            self.optimizers().step()
            self.optimizers().zero_grad()
            if batch_idx == 1:
                self.lr_schedulers().step()

    model = Manual()
    quiet_trainer(max_epochs=2, limit_train_batches=2).fit(model, loader())
    assert model.lrs == [1.0, 1.0, 0.5, 0.5]


def test_a_step_interval_plateau_scheduler_steps_once_per_optimizer_step():
    steps = []

    class Plateau(Regressor):
        def validation_step(self, batch, batch_idx):
            self.log("val_loss", self.loss(batch))

        def lr_scheduler_step(self, scheduler, metric):
            steps.append(self.global_step)
            super().lr_scheduler_step(scheduler, metric)

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
            # strict=False: before the first validation there is no val_loss to read (as in Lightning)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss",
                                                             "interval": "step", "strict": False}}

    trainer = quiet_trainer(max_epochs=1, val_check_interval=2, num_sanity_val_steps=0)
    trainer.fit(Plateau(), loader(), loader(n=16))
    assert steps == [2, 3, 4, 5, 6, 7, 8]  # from the first validation on, once after every step


def test_monitor_may_stand_beside_the_scheduler():
    module = Regressor()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    _, configs = parse_optimizers({"optimizer": optimizer, "lr_scheduler": plateau, "monitor": "val_loss"})
    assert configs[0].monitor == "val_loss" and configs[0].reduce_on_plateau


class ManualPlateau(Regressor):
    def __init__(self, monitor: str | None) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.monitor = monitor

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        optimizer.zero_grad()
        loss = self.loss(batch)
        self.manual_backward(loss)
        optimizer.step()
        self.lr_schedulers().step(loss.detach())  # the user steps it, with the metric of their choice
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        config = {"scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0)}
        if self.monitor is not None:
            config["monitor"] = self.monitor
        return {"optimizer": optimizer, "lr_scheduler": config}


def test_a_plateau_scheduler_in_manual_optimization_needs_no_monitor_and_one_given_is_warned_about():
    quiet_trainer(max_epochs=1).fit(ManualPlateau(None), loader())  # the user steps it: nothing to monitor
    with pytest.warns(RuntimeWarning, match=r"key\(s\) \['monitor'\], but the keys will be ignored"):
        quiet_trainer(max_epochs=1).fit(ManualPlateau("train_loss"), loader())


class StepsEvery:  # a scheduler of one's own, without step()
    def __init__(self, optimizer):
        self.optimizer, self.advanced = optimizer, 0

    def advance(self):
        self.advanced += 1
        for group in self.optimizer.param_groups:
            group["lr"] *= 0.5

    def state_dict(self):
        return {"advanced": self.advanced}

    def load_state_dict(self, state):
        self.advanced = state["advanced"]


class OwnScheduler(Regressor):
    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
        return {"optimizer": optimizer, "lr_scheduler": StepsEvery(optimizer)}


def test_a_scheduler_without_step_is_refused_in_automatic_optimization_unless_the_module_steps_it():
    with pytest.raises(MisconfigurationError, match=r"has no step\(\) method.*Override the Module's lr_scheduler_step"):
        quiet_trainer(max_epochs=1).fit(OwnScheduler(), loader())

    class StepsIt(OwnScheduler):
        def lr_scheduler_step(self, scheduler, metric):
            scheduler.advance()

    model = StepsIt()
    quiet_trainer(max_epochs=2).fit(model, loader())
    assert model.lr_schedulers().advanced == 2 and model.optimizers().param_groups[0]["lr"] == 0.25


def test_a_scheduler_without_step_is_the_users_to_drive_in_manual_optimization():
    class Manual(OwnScheduler):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            self.manual_backward(self.loss(batch))
            self.optimizers().step()
            self.optimizers().zero_grad()
            if batch_idx == 0:
                self.lr_schedulers().advance()

    model = Manual()
    quiet_trainer(max_epochs=2).fit(model, loader())
    assert model.lr_schedulers().advanced == 2
