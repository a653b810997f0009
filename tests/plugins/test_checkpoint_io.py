"""``CheckpointIO`` plugins: every save, load and removal the Trainer and ModelCheckpoint make goes through the one in
``plugins=`` (or a strategy's ``checkpoint_io=``), with Lightning's method names and arguments; the default one
keeps framework's atomic writes and safe loading; ``AsyncCheckpointIO`` wraps any of them."""

from __future__ import annotations

import gzip
import io
import os

import pytest
import torch

from framework.callbacks import ModelCheckpoint
from framework.errors import MisconfigurationError, UnsafeCheckpointError
from framework.plugins import AsyncCheckpointIO, CheckpointIO, TorchCheckpointIO
from framework.strategies import DDPStrategy, FSDPStrategy, SingleDeviceStrategy
from framework.testing import spawn
from tests.helpers import Regressor, loader, quiet_trainer


class GzipCheckpointIO(CheckpointIO):
    """A library's plugin: checkpoints gzip-compressed, each call recorded (Lightning's 2.6 signatures)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.calls.append(("save", os.path.basename(path)))
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        with gzip.open(path, "wb") as file:
            file.write(buffer.getvalue())

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        self.calls.append(("load", os.path.basename(path), weights_only))
        with gzip.open(path, "rb") as file:
            return torch.load(io.BytesIO(file.read()), map_location=map_location, weights_only=True)

    def remove_checkpoint(self, path):
        self.calls.append(("remove", os.path.basename(path)))
        os.remove(path)

    def teardown(self):
        self.calls.append(("teardown",))


class OldStyleCheckpointIO(GzipCheckpointIO):
    """Written for Lightning before 2.4: ``load_checkpoint`` takes no ``weights_only``."""

    def load_checkpoint(self, path, map_location=None):
        return super().load_checkpoint(path, map_location)


def fit_with(tmp_path, checkpoint_io, **kwargs):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpts", save_last=True, **kwargs)
    trainer = quiet_trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=0, callbacks=[checkpoint],
                            enable_checkpointing=True, plugins=[checkpoint_io])
    trainer.fit(Regressor(), loader())
    return trainer, checkpoint


def test_every_save_load_and_removal_goes_through_the_plugin(tmp_path):
    plugin = GzipCheckpointIO()
    trainer, checkpoint = fit_with(tmp_path, plugin)
    assert trainer.checkpoint_io is plugin and trainer.strategy.checkpoint_io is plugin
    assert plugin.calls[:5] == [("save", "epoch=0-step=2.ckpt"), ("save", "last.ckpt"),
                                ("save", "epoch=1-step=4.ckpt"), ("save", "last.ckpt"),
                                ("remove", "epoch=0-step=2.ckpt")]
    assert sorted(os.listdir(tmp_path / "ckpts")) == ["epoch=1-step=4.ckpt", "last.ckpt"]
    with open(checkpoint.last_model_path, "rb") as file:
        assert file.read(2) == b"\x1f\x8b"  # the plugin's format, not torch.save's
    plugin.calls.clear()
    trainer.test(Regressor(), loader(), ckpt_path=checkpoint.last_model_path, verbose=False)
    assert plugin.calls[0] == ("load", "last.ckpt", None)  # as Lightning calls it: weights_only, the plugin's map


def test_resuming_through_the_plugin_continues_the_run_exactly(tmp_path):
    plugin = GzipCheckpointIO()
    trainer, checkpoint = fit_with(tmp_path, plugin)
    resumed = quiet_trainer(max_epochs=3, limit_train_batches=2, limit_val_batches=0, plugins=[GzipCheckpointIO()])
    model = Regressor()
    resumed.fit(model, loader(), ckpt_path=checkpoint.last_model_path)
    straight = Regressor()
    quiet_trainer(max_epochs=3, limit_train_batches=2, limit_val_batches=0).fit(straight, loader())
    assert resumed.global_step == 6
    torch.testing.assert_close(model.state_dict(), straight.state_dict(), rtol=0, atol=0)


def test_ckpt_path_last_takes_the_plugins_files_as_they_are(tmp_path):
    _, checkpoint = fit_with(tmp_path, GzipCheckpointIO())
    plugin = GzipCheckpointIO()
    callback = ModelCheckpoint(dirpath=tmp_path / "ckpts", save_last=True)
    trainer = quiet_trainer(max_epochs=3, limit_train_batches=2, limit_val_batches=0, plugins=[plugin],
                            callbacks=[callback], enable_checkpointing=True)
    trainer.fit(Regressor(), loader(), ckpt_path="last")  # a gzip file is whole to the plugin that wrote it
    assert ("load", "last.ckpt", None) in plugin.calls and trainer.global_step == 6
    assert TorchCheckpointIO().is_complete(checkpoint.last_model_path) is False  # not a torch.save archive
    assert GzipCheckpointIO().is_complete(checkpoint.last_model_path)


def test_a_plugin_written_before_weights_only_existed_still_loads(tmp_path):
    plugin = OldStyleCheckpointIO()
    trainer, checkpoint = fit_with(tmp_path, plugin)
    trainer.validate(Regressor(), loader(), ckpt_path=checkpoint.last_model_path, verbose=False)
    assert ("load", "last.ckpt", None) in plugin.calls


def test_a_strategy_takes_the_plugin_too_and_the_plugins_argument_wins(tmp_path):
    own, given = GzipCheckpointIO(), GzipCheckpointIO()
    assert quiet_trainer(strategy=SingleDeviceStrategy(checkpoint_io=own)).checkpoint_io is own
    assert quiet_trainer(strategy=SingleDeviceStrategy(checkpoint_io=own), plugins=[given]).checkpoint_io is given
    assert quiet_trainer(strategy=DDPStrategy(checkpoint_io=own)).strategy.checkpoint_io is own
    with pytest.raises(MisconfigurationError, match=r"SingleDeviceStrategy\(checkpoint_io='gzip'"):
        SingleDeviceStrategy(checkpoint_io="gzip")


def test_single_device_strategy_takes_lightnings_device_argument():
    assert quiet_trainer(strategy=SingleDeviceStrategy("cpu")).runtime.device == torch.device("cpu")
    with pytest.raises(MisconfigurationError, match=r"given device 'cuda:1', but the accelerator is 'cpu'"):
        quiet_trainer(strategy=SingleDeviceStrategy("cuda:1"))
    with pytest.raises(MisconfigurationError, match=r"SingleDeviceStrategy\(precision_plugin=.*plugins="):
        SingleDeviceStrategy("cpu", precision_plugin="bf16")


def test_the_default_plugin_writes_atomically_and_loads_safely(tmp_path):
    default = quiet_trainer().checkpoint_io
    assert type(default) is TorchCheckpointIO
    path = tmp_path / "state.ckpt"
    default.save_checkpoint({"state_dict": {"w": torch.ones(2)}, "when": 3}, path)
    assert os.listdir(tmp_path) == ["state.ckpt"]  # no temporary name left
    assert default.load_checkpoint(path)["when"] == 3
    torch.save({"state_dict": {}, "payload": os.getcwd}, tmp_path / "unsafe.ckpt")  # names a function
    with pytest.raises(UnsafeCheckpointError, match="unsafe.ckpt"):
        default.load_checkpoint(tmp_path / "unsafe.ckpt")
    default.remove_checkpoint(path)
    default.remove_checkpoint(path)  # nothing there: nothing happens
    assert not path.exists()


def test_async_checkpoint_io_writes_through_the_plugin_it_wraps_in_the_background(tmp_path):
    inner = GzipCheckpointIO()
    writer = AsyncCheckpointIO(inner)
    trainer, checkpoint = fit_with(tmp_path, writer, save_top_k=1, monitor="step", mode="max")
    assert trainer.checkpoint_io is writer and checkpoint._saves.writer is writer
    saves = [call for call in inner.calls if call[0] == "save"]
    assert saves == [("save", "epoch=0-step=2.ckpt"), ("save", "last.ckpt"), ("save", "epoch=1-step=4.ckpt"),
                     ("save", "last.ckpt")]
    assert ("remove", "epoch=0-step=2.ckpt") in inner.calls and ("teardown",) in inner.calls
    with gzip.open(checkpoint.best_model_path, "rb") as file:
        assert torch.load(io.BytesIO(file.read()), weights_only=True)["global_step"] == 4


def test_async_save_of_a_checkpoint_callback_wraps_the_trainers_plugin(tmp_path):
    plugin = GzipCheckpointIO()
    _, checkpoint = fit_with(tmp_path, plugin, async_save=True)
    assert isinstance(checkpoint._saves.writer, AsyncCheckpointIO) and checkpoint._saves.writer.checkpoint_io is plugin
    assert [call for call in plugin.calls if call[0] == "save"][-1] == ("save", "last.ckpt")


def test_a_sharded_strategy_refuses_a_plugin_it_would_not_use():
    with pytest.raises(MisconfigurationError, match=r"FSDPStrategy writes sharded checkpoints.*state_dict_type='full'"):
        quiet_trainer(strategy=FSDPStrategy(), plugins=[GzipCheckpointIO()])
    quiet_trainer(strategy=FSDPStrategy(state_dict_type="full"), plugins=[GzipCheckpointIO()])
    quiet_trainer(strategy=FSDPStrategy(), plugins=[AsyncCheckpointIO()])  # framework's own writer, sharded too


def _fit_on_two_ranks(rank: int, directory: str) -> list:
    plugin = GzipCheckpointIO()
    trainer = quiet_trainer(devices=2, strategy="ddp", max_epochs=2, limit_train_batches=2, limit_val_batches=0,
                            enable_checkpointing=True, plugins=[plugin],
                            callbacks=[ModelCheckpoint(dirpath=directory, save_last=True)])
    trainer.fit(Regressor(), loader())
    return plugin.calls


def test_on_two_ranks_rank_zero_writes_and_removes_through_the_plugin(tmp_path):
    calls = spawn(2, _fit_on_two_ranks, str(tmp_path))
    assert [call[0] for call in calls[0]].count("save") == 4 and ("remove", "epoch=0-step=2.ckpt") in calls[0]
    assert not any(call[0] in ("save", "remove") for call in calls[1])
    assert sorted(os.listdir(tmp_path)) == ["epoch=1-step=4.ckpt", "last.ckpt"]
