"""A run half-trained with Lightning 2.x goes on here from its checkpoint."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import framework
from framework.callbacks import EarlyStopping, ModelCheckpoint
from tests.helpers import Regressor, loader, quiet_trainer


class Momentum(Regressor):
    """SGD with momentum and an epoch StepLR: a resume that drops either state ends with other weights."""

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]


def _plain_epochs(model: nn.Module, epochs: int) -> tuple[torch.optim.Optimizer, object]:
    """Trains ``model`` as Momentum does, in a plain loop; returns its optimizer and scheduler."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for _ in range(epochs):
        for x, y in loader():
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
        scheduler.step()
    return optimizer, scheduler


def _lightning_layout(model: nn.Module, optimizer, scheduler, **extra) -> dict:
    """What Lightning 2.6 writes at the end of epoch 0 of 8 batches (its loop progress trimmed to what we read)."""
    return {
        "epoch": 0, "global_step": 8, "pytorch-lightning_version": "2.6.6",
        "state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()],
        "lr_schedulers": [scheduler.state_dict()],
        "hparams_name": "kwargs", "hyper_parameters": {"lr": 0.05, "features": 4},
        "loops": {
            "fit_loop": {
                "epoch_progress": {"current": {"ready": 1, "started": 1, "processed": 1, "completed": 0}},
                "epoch_loop.batch_progress": {"total": {"processed": 8}, "current": {"processed": 8}},
                "epoch_loop.state_dict": {"_batches_that_stepped": 8},
            },
            "validate_loop": {}, "test_loop": {}, "predict_loop": {},
        },
        **extra,
    }


def test_resume_from_a_lightning_layout_equals_an_uninterrupted_plain_run(tmp_path):
    expected = Regressor().net
    _plain_epochs(expected, 2)
    half = Regressor().net
    optimizer, scheduler = _plain_epochs(half, 1)
    path = tmp_path / "lightning.ckpt"
    torch.save(_lightning_layout(nn.ModuleDict({"net": half}), optimizer, scheduler, Unknown={"x": 1}), path)

    model = Momentum()
    trainer = quiet_trainer(max_epochs=2)
    with pytest.warns(UserWarning, match=r"written by Lightning 2\.6\.6\. Restored: the weights, the optimizer states, "
                                         r"the LR scheduler states, the progress \(going on in epoch 1 at global step "
                                         r"8\).*Not restored: Lightning's loop internals.*random state and the shuffle "
                                         r"order.*'Unknown' entry") as caught:
        trainer.fit(model, loader(), ckpt_path=path)
    assert caught[0].filename == __file__  # points at the user's fit call
    assert trainer.global_step == 16 and trainer.current_epoch == 2
    torch.testing.assert_close(model.net.state_dict(), expected.state_dict())


def test_lightning_precision_and_datamodule_entries_are_restored(tmp_path):
    class Data(framework.DataModule):
        def __init__(self):
            super().__init__()
            self.restored = None

        def train_dataloader(self):
            return loader()

        def load_state_dict(self, state_dict):
            self.restored = state_dict

    half = Regressor().net
    optimizer, scheduler = _plain_epochs(half, 1)
    scaler = torch.amp.GradScaler("cpu", init_scale=512.0)
    data = Data()
    checkpoint = _lightning_layout(nn.ModuleDict({"net": half}), optimizer, scheduler,
                                   MixedPrecision=scaler.state_dict(), **{type(data).__qualname__: {"shard": 3}})
    path = tmp_path / "lightning.ckpt"
    torch.save(checkpoint, path)
    trainer = quiet_trainer(max_epochs=1, precision="16-mixed")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Momentum(), datamodule=data, ckpt_path=path)  # already at max_epochs: nothing trains
    assert data.restored == {"shard": 3}
    assert trainer.precision_plugin.scaler.get_scale() == 512.0
    (message,) = [str(w.message) for w in caught if "Lightning" in str(w.message)]
    assert "the precision state" in message and "entry" not in message


def test_load_from_checkpoint_reads_a_lightning_layout(tmp_path):
    half = Regressor(lr=0.2).net
    optimizer, scheduler = _plain_epochs(half, 1)
    path = tmp_path / "lightning.ckpt"
    torch.save(_lightning_layout(nn.ModuleDict({"net": half}), optimizer, scheduler), path)
    model = Regressor.load_from_checkpoint(path)
    assert dict(model.hparams) == {"lr": 0.05, "features": 4}
    torch.testing.assert_close(model.net.state_dict(), half.state_dict())


def test_evaluating_a_lightning_checkpoint_does_not_warn_about_resuming(tmp_path):
    half = Regressor().net
    optimizer, scheduler = _plain_epochs(half, 1)
    path = tmp_path / "lightning.ckpt"
    torch.save(_lightning_layout(nn.ModuleDict({"net": half}), optimizer, scheduler), path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (result,) = quiet_trainer().test(Regressor(), loader(), ckpt_path=path, verbose=False)
    x, y = loader().dataset.tensors
    assert result["test_loss"] == pytest.approx(nn.functional.mse_loss(half(x), y).item(), rel=1e-5)


# -- a file Lightning itself wrote ------------------------------------------------------------------------------


def _train_with_lightning(tmp_path, lightning, max_epochs: int, dirpath=None):
    class LightningMomentum(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Regressor().net

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", nn.functional.mse_loss(self.net(x), y))

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]

    callbacks = [lightning.pytorch.callbacks.ModelCheckpoint(dirpath=dirpath, monitor="val_loss", save_last=True),
                 lightning.pytorch.callbacks.EarlyStopping("val_loss", patience=5)] if dirpath else []
    model = LightningMomentum()
    trainer = lightning.Trainer(max_epochs=max_epochs, accelerator="cpu", logger=False, enable_progress_bar=False,
                                enable_model_summary=False, enable_checkpointing=bool(dirpath), callbacks=callbacks,
                                default_root_dir=tmp_path)
    trainer.fit(model, loader(), loader(n=16))
    return model


def test_a_file_written_by_lightning_resumes_here(tmp_path):
    lightning = pytest.importorskip("lightning")
    expected = _train_with_lightning(tmp_path, lightning, max_epochs=2)
    _train_with_lightning(tmp_path, lightning, max_epochs=1, dirpath=tmp_path / "lightning")

    model = Momentum()
    checkpoint, stopping = ModelCheckpoint(monitor="val_loss"), EarlyStopping("val_loss", patience=5)
    trainer = quiet_trainer(max_epochs=2, enable_checkpointing=True, callbacks=[checkpoint, stopping],
                            default_root_dir=tmp_path)
    with pytest.warns(UserWarning, match="written by Lightning"):
        trainer.fit(model, loader(), loader(n=16), ckpt_path=tmp_path / "lightning" / "last.ckpt")
    torch.testing.assert_close(model.net.state_dict(), expected.net.state_dict())
    assert trainer.global_step == 16
    assert stopping.best_score < float("inf")  # EarlyStopping's state came across under the same key
