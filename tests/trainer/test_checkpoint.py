"""Resuming fit from checkpoints written at the different points of the loop."""

from __future__ import annotations

import pytest
import torch

import framework
from framework.callbacks import ModelCheckpoint
from framework.io.checkpoint_storage import load_checkpoint
from tests.helpers import Regressor, loader, quiet_trainer


class SaveAt(framework.Callback):
    def __init__(self, path, hook: str, batch_idx: int = -1) -> None:
        self.path, self.hook, self.batch_idx = str(path), hook, batch_idx

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self.hook == "batch" and batch_idx == self.batch_idx and trainer.current_epoch == 0:
            trainer.save_checkpoint(self.path)

    def on_validation_end(self, trainer, module):
        if self.hook == "validation" and trainer.current_epoch == 0:
            trainer.save_checkpoint(self.path)


class Counts(Regressor):
    def __init__(self):
        super().__init__()
        self.epoch_starts: list[int] = []
        self.batches = 0

    def on_train_epoch_start(self):
        self.epoch_starts.append(self.current_epoch)

    def training_step(self, batch, batch_idx):
        self.batches += 1
        return super().training_step(batch, batch_idx)


def _weights(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _resume_matches_uninterrupted(tmp_path, hook, batch_idx=-1):
    full = Counts()
    quiet_trainer(max_epochs=2, num_sanity_val_steps=0).fit(full, loader(), loader(n=16))
    path = tmp_path / "mid.ckpt"
    quiet_trainer(max_epochs=1, num_sanity_val_steps=0, callbacks=[SaveAt(path, hook, batch_idx)]).fit(
        Counts(), loader(), loader(n=16))
    resumed = Counts()
    trainer = quiet_trainer(max_epochs=2, num_sanity_val_steps=0)
    trainer.fit(resumed, loader(), loader(n=16), ckpt_path=path)
    torch.testing.assert_close(_weights(resumed), _weights(full))
    assert trainer.global_step == 16
    return resumed


def test_resume_from_the_last_batch_of_an_epoch_goes_on_with_the_next_epoch(tmp_path):
    resumed = _resume_matches_uninterrupted(tmp_path, "batch", batch_idx=7)
    assert resumed.epoch_starts == [1] and resumed.batches == 8


def test_resume_from_validation_at_the_epoch_end(tmp_path):
    resumed = _resume_matches_uninterrupted(tmp_path, "validation")
    assert resumed.epoch_starts == [1] and resumed.batches == 8


def test_resume_from_inside_an_epoch_skips_the_batches_already_trained(tmp_path):
    resumed = _resume_matches_uninterrupted(tmp_path, "batch", batch_idx=2)
    assert resumed.epoch_starts == [1] and resumed.batches == 5 + 8  # epoch 0 goes on: no start hook, as Lightning


def test_resuming_past_max_epochs_is_refused_but_resuming_at_it_finishes(tmp_path):
    trainer = quiet_trainer(max_epochs=3)
    trainer.fit(Regressor(), loader())
    trainer.save_checkpoint(tmp_path / "three.ckpt")  # current_epoch 3
    with pytest.raises(framework.MisconfigurationError,
                       match=r"current_epoch=3, but you have set Trainer\(max_epochs=2\).*above 3"):
        quiet_trainer(max_epochs=2).fit(Regressor(), loader(), ckpt_path=tmp_path / "three.ckpt")
    again = Counts()
    finished = quiet_trainer(max_epochs=3)
    finished.fit(again, loader(), ckpt_path=tmp_path / "three.ckpt")  # nothing left to train, as in Lightning
    assert again.batches == 0 and finished.current_epoch == 3


def test_on_load_checkpoint_runs_on_the_module_first_then_on_callbacks(tmp_path):
    order = []

    class Listens(framework.Callback):
        def on_load_checkpoint(self, trainer, module, checkpoint):
            order.append("callback")

    class Module(Regressor):
        def on_load_checkpoint(self, checkpoint):
            order.append("module")

    path = tmp_path / "a.ckpt"
    trainer = quiet_trainer(max_epochs=1, callbacks=[Listens()])
    trainer.fit(Module(), loader())
    trainer.save_checkpoint(path)
    quiet_trainer(max_epochs=2, callbacks=[Listens()]).fit(Module(), loader(), ckpt_path=path)
    assert order == ["module", "callback"]
    order.clear()
    quiet_trainer(callbacks=[Listens()]).validate(Module(), loader(), ckpt_path=path, verbose=False)
    assert order == ["module", "callback"]  # in every stage, as in Lightning 2.6


class Stateful(framework.Callback):
    def __init__(self, count=0):
        self.count = count

    def state_dict(self):
        return {"count": self.count} if self.count else {}

    def load_state_dict(self, state_dict):
        self.count = state_dict["count"]


def test_only_callbacks_with_state_are_saved_and_two_may_not_share_a_key(tmp_path):
    trainer = quiet_trainer(max_epochs=1, callbacks=[Stateful(0), framework.Callback()])
    trainer.fit(Regressor(), loader())
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    assert torch.load(tmp_path / "a.ckpt", weights_only=True)["callbacks"] == {}
    trainer = quiet_trainer(max_epochs=1, callbacks=[Stateful(3)])
    trainer.fit(Regressor(), loader())
    trainer.save_checkpoint(tmp_path / "b.ckpt")
    restored = Stateful(0)
    quiet_trainer(max_epochs=2, callbacks=[restored]).fit(Regressor(), loader(), ckpt_path=tmp_path / "b.ckpt")
    assert restored.count == 3
    with pytest.raises(framework.MisconfigurationError, match=r"Two Stateful callbacks share the state key "
                                                               r"'Stateful'"):
        quiet_trainer(max_epochs=1, callbacks=[Stateful(1), Stateful(2)])

    class AddsAnother(Regressor):
        def configure_callbacks(self):
            return [Stateful(2)]

    trainer = quiet_trainer(max_epochs=1, callbacks=[Stateful(1)])
    trainer.fit(AddsAnother(), loader())  # configure_callbacks replaces the Trainer's Stateful: one key
    assert [type(cb).__name__ for cb in trainer.callbacks] == ["Stateful"]


def _lightning_checkpoint(model, epoch, global_step, epochs_started, epochs_processed, batches_processed):
    """A checkpoint laid out as Lightning 2.x writes it (the loop progress Lightning stores, trimmed)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    return {
        "epoch": epoch, "global_step": global_step, "pytorch-lightning_version": "2.6.6",
        "state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], "lr_schedulers": [],
        "loops": {"fit_loop": {
            "epoch_progress": {"current": {"ready": epochs_started, "started": epochs_started,
                                           "processed": epochs_processed, "completed": epochs_processed}},
            "epoch_loop.batch_progress": {"total": {"processed": global_step},
                                          "current": {"processed": batches_processed}},
            "epoch_loop.state_dict": {"_batches_that_stepped": global_step},
        }},
    }


@pytest.mark.parametrize(("saved", "epoch_starts", "batches"), [
    # trainer.save_checkpoint after fit(max_epochs=1): epoch is already 1, nothing left of epoch 0
    ((1, 8, 1, 1, 8), [1], 8),
    # ModelCheckpoint at the end of epoch 0: epoch is still 0, its batches all ran
    ((0, 8, 1, 1, 8), [1], 8),
    # mid-epoch, after 3 batches of epoch 0: it goes on without on_train_epoch_start, as in Lightning
    ((0, 3, 1, 0, 3), [1], 5 + 8),
])
def test_resume_from_a_lightning_checkpoint_continues_where_it_stopped(tmp_path, saved, epoch_starts, batches):
    path = tmp_path / "lightning.ckpt"
    torch.save(_lightning_checkpoint(Regressor(), *saved), path)
    model = Counts()
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(model, loader(), ckpt_path=path)
    assert model.epoch_starts == epoch_starts and model.batches == batches
    assert trainer.global_step == 16 and trainer.current_epoch == 2


def test_evaluating_without_a_model_after_fit_loads_the_best_checkpoint(tmp_path):
    class KeepsBest(framework.Callback):
        """Saves one checkpoint after the first epoch and calls it the best (ModelCheckpoint's attributes)."""

        runs_last = True

        def __init__(self):
            self.best_model_path = ""

        def on_train_epoch_end(self, trainer, module):
            if not self.best_model_path:
                self.best_model_path = str(tmp_path / "best.ckpt")
                trainer.save_checkpoint(self.best_model_path)

    model = Regressor()
    trainer = quiet_trainer(max_epochs=3, callbacks=[KeepsBest()])
    trainer.fit(model, loader())
    best = Regressor.load_from_checkpoint(tmp_path / "best.ckpt")
    with pytest.warns(UserWarning, match=r"trainer\.test\(\) was called without a model, so the best checkpoint"):
        trainer.test(dataloaders=loader(), verbose=False)
    torch.testing.assert_close(_weights(model), _weights(best))  # the model now holds the best weights
    assert trainer.ckpt_path == str(tmp_path / "best.ckpt")
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(Regressor(), loader())
    trainer.test(dataloaders=loader(), verbose=False)  # no checkpoint callback: the current weights, no error
    assert trainer.ckpt_path is None


class SizedData(framework.DataModule):
    """Its training set size is state that checkpoints carry."""

    def __init__(self, n: int = 64):
        super().__init__()
        self.n = n

    def train_dataloader(self):
        return loader(n=self.n)

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, state_dict):
        self.n = state_dict["n"]


class ReadsSteps(Regressor):
    """Sizes its scheduler from estimated_stepping_batches, which asks for the training loader early."""

    def configure_optimizers(self):
        optimizer = super().configure_optimizers()
        self.steps_seen = self.trainer.estimated_stepping_batches
        return optimizer


def test_resuming_restores_the_datamodule_before_the_loaders_are_asked_for(tmp_path):
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(ReadsSteps(), datamodule=SizedData(n=32))  # 4 batches an epoch
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    model, resumed = ReadsSteps(), quiet_trainer(max_epochs=2)
    resumed.fit(model, datamodule=SizedData(n=64), ckpt_path=tmp_path / "a.ckpt")
    assert model.steps_seen == 8 and resumed.num_training_batches == 4 and resumed.global_step == 8


def test_evaluating_from_a_checkpoint_restores_the_datamodule_before_its_loaders(tmp_path):
    class TestSized(SizedData):
        def test_dataloader(self):
            return loader(n=self.n)

    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(Regressor(), datamodule=TestSized(n=32))
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    trainer = quiet_trainer()
    trainer.test(Regressor(), datamodule=TestSized(n=64), ckpt_path=tmp_path / "a.ckpt", verbose=False)
    assert trainer.num_test_batches == [4]


class WorseEachEpoch(Regressor):
    """Its monitored score rises every epoch, so the best checkpoint is the first and differs from the last."""

    def validation_step(self, batch, batch_idx):
        self.log("score", float(self.current_epoch))


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_evaluation_loads_the_best_or_the_last_checkpoint_named(tmp_path, stage):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="score", save_last=True)
    trainer = quiet_trainer(max_epochs=3, enable_checkpointing=True, callbacks=[checkpoint])
    trainer.fit(WorseEachEpoch(), loader(), loader(n=8))
    x = loader(n=8).dataset.tensors[0]
    for name, path in [("best", checkpoint.best_model_path), ("last", checkpoint.last_model_path)]:
        model = WorseEachEpoch()
        quiet = {} if stage == "predict" else {"verbose": False}
        getattr(trainer, stage)(model, loader(n=8), ckpt_path=name, **quiet)
        assert trainer.ckpt_path == path
        saved = load_checkpoint(path)["state_dict"]
        torch.testing.assert_close(model.net.weight, saved["net.weight"])
        torch.testing.assert_close(model(x), torch.nn.functional.linear(x, saved["net.weight"], saved["net.bias"]))
    assert checkpoint.best_model_path.endswith("epoch=0-step=8.ckpt")
