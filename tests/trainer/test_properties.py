"""What users read from a Trainer under Lightning's names (framework/trainer/properties.py)."""

from __future__ import annotations

import pytest
import torch

import framework
from tests.helpers import Regressor, loader, quiet_trainer


def test_is_last_batch_is_true_on_each_epochs_last_batch_only():
    seen = []

    class Watches(Regressor):
        def training_step(self, batch, batch_idx):
            seen.append(self.trainer.is_last_batch)
            return super().training_step(batch, batch_idx)

    quiet_trainer(max_epochs=2, limit_train_batches=3).fit(Watches(), loader())
    assert seen == [False, False, True] * 2


def test_loaders_and_their_batch_counts():
    train, val, test, predict = loader(), loader(n=16), loader(n=24), [loader(n=8), loader(n=16)]
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=1)
    assert trainer.train_dataloader is None and trainer.val_dataloaders is None
    trainer.fit(Regressor(), train, val)
    # the training loader is rebuilt around a resumable sampler (same dataset and settings); the others are as given
    assert trainer.train_dataloader.dataset is train.dataset and trainer.val_dataloaders is val
    assert trainer.train_dataloader.batch_size == train.batch_size
    assert trainer.num_val_batches == [2] and trainer.num_sanity_val_batches == [1]
    assert trainer.enable_validation
    trainer.test(dataloaders=test, verbose=False)
    assert trainer.test_dataloaders is test and trainer.num_test_batches == [3]

    class Predicts(Regressor):
        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return super().predict_step(batch, batch_idx)

    trainer.predict(Predicts(), predict)
    assert trainer.predict_dataloaders == predict and trainer.num_predict_batches == [1, 2]


class NoValidationStep(framework.Module):
    def __init__(self):
        super().__init__()
        self.net = Regressor().net

    def training_step(self, batch, batch_idx):
        x, y = batch
        return ((self.net(x) - y) ** 2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def test_enable_validation_is_false_without_a_step_data_or_a_limit():
    for model, val, limit in ((NoValidationStep(), loader(), 1.0), (Regressor(), None, 1.0),
                              (Regressor(), loader(), 0)):
        trainer = quiet_trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=limit)
        trainer.fit(model, loader(), val)
        assert not trainer.enable_validation


def test_the_stage_is_known_from_setup_on():
    stages = []

    class Watches(Regressor):
        def setup(self, stage):
            trainer = self.trainer
            stages.append((stage, trainer.training, trainer.validating, trainer.testing, trainer.predicting))

    model, trainer = Watches(), quiet_trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1)
    trainer.fit(model, loader(), loader())
    trainer.validate(model, loader(n=8), verbose=False)
    trainer.test(model, loader(n=8), verbose=False)
    trainer.predict(model, loader(n=8))
    assert stages == [
        ("fit", True, False, False, False), ("validate", False, True, False, False),
        ("test", False, False, True, False), ("predict", False, False, False, True),
    ]


def test_interrupted_and_ckpt_path(tmp_path):
    class Interrupts(Regressor):
        def training_step(self, batch, batch_idx):
            raise KeyboardInterrupt

    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(Regressor(), loader())
    assert not trainer.interrupted and trainer.ckpt_path is None
    path = tmp_path / "done.ckpt"
    trainer.save_checkpoint(path)
    trainer.validate(Regressor(), loader(), ckpt_path=path, verbose=False)
    assert trainer.ckpt_path == str(path)
    trainer = quiet_trainer(max_epochs=1)
    with pytest.warns(UserWarning, match="KeyboardInterrupt"), pytest.raises(KeyboardInterrupt):
        trainer.fit(Interrupts(), loader())
    assert trainer.interrupted


def test_estimated_stepping_batches_read_in_setup_asks_for_the_loader_once_per_fit():
    loads, estimates = [], []

    class Early(Regressor):
        def __init__(self, n):
            super().__init__()
            self.n = n

        def setup(self, stage):
            estimates.append(self.trainer.estimated_stepping_batches)

        def train_dataloader(self):
            loads.append(self.n)
            return loader(n=self.n)

    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(Early(64))
    trainer.max_epochs = 2
    trainer.fit(Early(16))
    assert loads == [64, 16] and estimates == [8, 4]  # the second fit's own loader, asked for once
    assert quiet_trainer(max_epochs=-1, max_steps=5).estimated_stepping_batches == 5


def test_num_val_batches_follows_the_running_stage():
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=1)
    trainer.fit(Regressor(), loader(), loader(n=40))
    assert trainer.num_val_batches == [5]
    seen = []

    class Watches(Regressor):
        def on_validation_start(self):
            seen.append(self.trainer.num_val_batches)

    trainer.validate(Watches(), loader(n=16), verbose=False)
    assert seen == [[2]] and trainer.num_val_batches == [2]


def test_ckpt_path_is_forgotten_by_the_next_run(tmp_path):
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(Regressor(), loader())
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    trainer.test(Regressor(), loader(), ckpt_path=tmp_path / "a.ckpt", verbose=False)
    assert trainer.ckpt_path == str(tmp_path / "a.ckpt")
    trainer.test(Regressor(), loader(), verbose=False)
    assert trainer.ckpt_path is None


class KeepsNothingOnDisk(framework.loggers.Logger):
    """A logger of the user's kind: no directory, and log_metrics taking its arguments by keyword only."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, dict]] = []

    def log_metrics(self, *, metrics, step):  # the Trainer passes metrics= and step=, as Lightning does
        self.calls.append((step, dict(metrics)))


def test_log_dir_follows_lightnings_rule(tmp_path):
    assert quiet_trainer(default_root_dir=tmp_path).log_dir == str(tmp_path)  # no logger
    csv = framework.loggers.CSVLogger(tmp_path, name="run")
    assert quiet_trainer(logger=csv).log_dir == csv.log_dir == str(tmp_path / "run" / "version_0")
    own = KeepsNothingOnDisk()
    trainer = quiet_trainer(logger=own, max_steps=2, log_every_n_steps=1, default_root_dir=tmp_path)
    assert trainer.log_dir is None  # its save_dir, as Lightning answers for loggers other than CSV and TensorBoard
    trainer.fit(Regressor(), loader())
    assert [step for step, _ in own.calls] == [0, 1]
