"""LearningRateMonitor: the values a StepLR schedule gives, names, intervals, and a missing logger."""

from __future__ import annotations

import warnings

import pytest
import torch

import framework
from framework.callbacks import BaseFinetuning, LearningRateMonitor
from framework.errors import MisconfigurationError
from tests.helpers import RecordingLogger, Regressor, loader, quiet_trainer


class Scheduled(Regressor):
    def __init__(self, interval="epoch", groups=1, momentum=0.0):
        super().__init__()
        self.interval, self.groups, self.momentum = interval, groups, momentum

    def configure_optimizers(self):
        params = list(self.parameters())
        groups = [{"params": params}] if self.groups == 1 else [{"params": params[:1]}, {"params": params[1:]}]
        optimizer = torch.optim.SGD(groups, lr=0.1, momentum=self.momentum)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": self.interval}}


def logged(logger, key):
    return [(step, round(metrics[key], 6)) for step, metrics in logger.calls if key in metrics]


def test_an_epoch_schedule_is_logged_at_each_epoch_start():
    logger = RecordingLogger()
    trainer = quiet_trainer(max_epochs=3, logger=logger, callbacks=[LearningRateMonitor()])
    trainer.fit(Scheduled(), loader())  # 8 steps an epoch
    assert logged(logger, "lr-SGD") == [(0, 0.1), (8, 0.05), (16, 0.025)]
    assert trainer.callback_metrics["lr-SGD"].item() == pytest.approx(0.025)


def test_a_step_schedule_is_logged_at_the_logged_steps():
    logger = RecordingLogger()
    trainer = quiet_trainer(max_steps=6, logger=logger, log_every_n_steps=2, callbacks=[LearningRateMonitor()])
    trainer.fit(Scheduled(interval="step"), loader())
    # at the batch start of steps 2, 4, 6 (logged at their index 1, 3, 5): after 1, 3, 5 halvings
    assert logged(logger, "lr-SGD") == [(1, 0.05), (3, 0.0125), (5, 0.003125)]


def test_param_groups_and_momentum_get_their_own_names():
    logger = RecordingLogger()
    trainer = quiet_trainer(max_epochs=1, logger=logger,
                            callbacks=[LearningRateMonitor(logging_interval="epoch", log_momentum=True)])
    trainer.fit(Scheduled(groups=2, momentum=0.9), loader())
    assert set(logger.calls[-1][1]) >= {"lr-SGD/pg1", "lr-SGD/pg2", "lr-SGD/pg1-momentum", "lr-SGD/pg2-momentum"}
    assert logger.calls[-1][1]["lr-SGD/pg2-momentum"] == 0.9


def test_two_optimizers_of_one_class_are_told_apart():
    class Two(Regressor):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.other = torch.nn.Linear(1, 1)

        def training_step(self, batch, batch_idx):
            for optimizer in self.optimizers():
                optimizer.zero_grad()
            self.manual_backward(self.loss(batch) + self.other.weight.sum())
            for optimizer in self.optimizers():
                optimizer.step()

        def configure_optimizers(self):
            return [torch.optim.SGD(self.net.parameters(), lr=0.1), torch.optim.SGD(self.other.parameters(), lr=0.2)]

    logger = RecordingLogger()
    quiet_trainer(max_epochs=1, logger=logger, callbacks=[LearningRateMonitor()]).fit(Two(), loader())
    assert {key: value for key, value in logger.calls[0][1].items() if key.startswith("lr")} == {
        "lr-SGD": 0.1, "lr-SGD-1": 0.2}


def test_without_a_logger_it_says_so():
    with pytest.raises(MisconfigurationError, match="LearningRateMonitor needs a logger"):
        quiet_trainer(max_epochs=1, logger=False, callbacks=[LearningRateMonitor()]).fit(Scheduled(), loader())
    with pytest.raises(MisconfigurationError, match="logging_interval='batch'"):
        LearningRateMonitor(logging_interval="batch")


class PlainSGD(Regressor):
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)  # SGD groups hold momentum=0: not "no momentum"


class Adagrad(Regressor):
    def configure_optimizers(self):
        return torch.optim.Adagrad(self.parameters(), lr=0.1)  # no momentum, no betas


def test_log_momentum_warns_for_an_optimizer_without_momentum_as_lightning_does():
    monitor = LearningRateMonitor(log_momentum=True)
    with pytest.warns(RuntimeWarning, match="log_momentum=True, but some optimizers do not have momentum"):
        quiet_trainer(max_epochs=1, callbacks=[monitor], logger=RecordingLogger()).fit(Adagrad(), loader())
    assert monitor.last_momentum_values == {"lr-Adagrad-momentum": 0.0}
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*do not have momentum")
        quiet_trainer(max_epochs=1, callbacks=[LearningRateMonitor(log_momentum=True)],
                      logger=RecordingLogger()).fit(PlainSGD(), loader())


def test_a_parameter_group_added_mid_run_renames_the_key_as_lightning_does():
    from framework.callbacks import BackboneFinetuning

    class WithBackbone(Regressor):
        def __init__(self):
            super().__init__()
            self.backbone = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.net(self.backbone(x))

        def configure_optimizers(self):
            return torch.optim.SGD(self.net.parameters(), lr=0.05)

    logger = RecordingLogger()
    callbacks = [BackboneFinetuning(unfreeze_backbone_at_epoch=1), LearningRateMonitor()]
    quiet_trainer(max_epochs=2, logger=logger, log_every_n_steps=4, callbacks=callbacks).fit(WithBackbone(), loader())
    names = [(step, sorted(key for key in metrics if key.startswith("lr-"))) for step, metrics in logger.calls
             if any(key.startswith("lr-") for key in metrics)]
    one, two = ["lr-SGD"], ["lr-SGD/pg1", "lr-SGD/pg2"]  # at each epoch's start, then every 4 steps
    assert names == [(0, one), (3, one), (7, one), (8, two), (11, two), (15, two)]
    last = [metrics for _, metrics in logger.calls if "lr-SGD/pg2" in metrics][-1]
    assert last["lr-SGD/pg2"] == pytest.approx(0.005)  # the backbone's: a tenth, as Lightning


class SGDAndAdam(Regressor):
    """Two optimizers over the head (manual optimization), SGD's learning rate halved every epoch; three frozen
    layers for finetuning to add as parameter groups."""

    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.extra = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

    def training_step(self, batch, batch_idx):
        for optimizer in self.optimizers():
            optimizer.zero_grad()
        self.manual_backward(self.loss(batch))
        for optimizer in self.optimizers():
            optimizer.step()

    def on_train_epoch_end(self):
        self.lr_schedulers().step()

    def configure_optimizers(self):
        sgd, adam = torch.optim.SGD(self.net.parameters(), lr=0.1), torch.optim.Adam(self.net.parameters(), lr=0.1)
        return [sgd, adam], [torch.optim.lr_scheduler.StepLR(sgd, step_size=1, gamma=0.5)]


def test_groups_added_to_several_optimizers_keep_each_history_under_its_new_name():
    class AddsGroups(BaseFinetuning):
        def freeze_before_training(self, pl_module):
            self.freeze(pl_module.extra)

        def finetune_function(self, pl_module, epoch, optimizer):
            if (epoch, type(optimizer)) in ((1, torch.optim.SGD), (2, torch.optim.Adam), (3, torch.optim.Adam)):
                self.unfreeze_and_add_param_group(pl_module.extra[epoch - 1], optimizer, lr=0.1)

    class KeysAtEpochStart(framework.Callback):
        def __init__(self):
            self.keys: list[list[str]] = []

        def on_train_epoch_start(self, trainer, pl_module):
            self.keys.append(list(monitor.lrs))

    monitor, keys = LearningRateMonitor(), KeysAtEpochStart()
    quiet_trainer(max_epochs=4, limit_train_batches=2, logger=RecordingLogger(),
                  callbacks=[AddsGroups(), monitor, keys]).fit(SGDAndAdam(), loader())
    # a one-group optimizer that gets a second: its key gains /pg1, keeps its history and moves to the end
    assert keys.keys == [["lr-SGD", "lr-Adam"], ["lr-Adam", "lr-SGD/pg1", "lr-SGD/pg2"],
                         ["lr-SGD/pg1", "lr-SGD/pg2", "lr-Adam/pg1", "lr-Adam/pg2"],
                         ["lr-SGD/pg1", "lr-SGD/pg2", "lr-Adam/pg1", "lr-Adam/pg2", "lr-Adam/pg3"]]
    assert dict(monitor.lrs) == {"lr-SGD/pg1": [0.1, 0.05, 0.025, 0.0125], "lr-SGD/pg2": [0.1, 0.05, 0.025],
                                 "lr-Adam/pg1": [0.1] * 4, "lr-Adam/pg2": [0.1, 0.1], "lr-Adam/pg3": [0.1]}
