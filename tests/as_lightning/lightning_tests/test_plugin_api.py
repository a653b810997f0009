"""Lightning's tests of its plugin API, written again in their own terms: they import only Lightning's names and
run under ``framework as-lightning`` (tests/as_lightning/test_lightning_tests.py starts them). What each checks is
what Lightning's own test of the same name checks, so a library whose tests lean on that behaviour keeps it."""

import os
import signal
from pathlib import Path
from typing import Any
from unittest import mock
from unittest.mock import MagicMock, Mock

import pytest
import torch
from lightning.fabric.plugins import CheckpointIO, TorchCheckpointIO
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.plugins import DoublePrecision, HalfPrecision, MixedPrecision
from lightning.pytorch.plugins.environments import LightningEnvironment, SLURMEnvironment, TorchElasticEnvironment
from lightning.pytorch.plugins.io.async_plugin import AsyncCheckpointIO
from lightning.pytorch.strategies import SingleDeviceStrategy


class CustomCheckpointIO(CheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None) -> None:
        torch.save(checkpoint, path)

    def load_checkpoint(self, path: _PATH, storage_options: Any | None = None, weights_only: bool = True):
        return torch.load(path, weights_only=True)

    def remove_checkpoint(self, path: _PATH) -> None:
        os.remove(path)


def _trainer(tmp_path, callback, **kwargs):
    return Trainer(default_root_dir=tmp_path, accelerator="cpu", callbacks=callback, max_epochs=2,
                   limit_train_batches=1, limit_val_batches=0, limit_test_batches=1, **kwargs)


def test_checkpoint_plugin_called(tmp_path):
    plugin = MagicMock(wraps=CustomCheckpointIO(), spec=CustomCheckpointIO)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    trainer = _trainer(tmp_path, checkpoint, strategy=SingleDeviceStrategy("cpu", checkpoint_io=plugin))
    trainer.fit(BoringModel())
    assert {path.name for path in Path(tmp_path).glob("*.ckpt")} == {"epoch=1-step=2.ckpt", "last.ckpt"}
    assert trainer.checkpoint_callback.best_model_path == str(tmp_path / "epoch=1-step=2.ckpt")
    assert trainer.checkpoint_callback.last_model_path == str(tmp_path / "last.ckpt")
    assert plugin.save_checkpoint.call_count == 4 and plugin.remove_checkpoint.call_count == 1
    trainer.test(BoringModel(), ckpt_path=checkpoint.last_model_path)
    plugin.load_checkpoint.assert_called_with(str(tmp_path / "last.ckpt"), weights_only=None)

    plugin.reset_mock()
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    trainer = _trainer(tmp_path, checkpoint, strategy=SingleDeviceStrategy("cpu"), plugins=[plugin])
    trainer.fit(BoringModel())
    assert {path.name for path in Path(tmp_path).glob("*.ckpt")} == {
        "epoch=1-step=2.ckpt", "last.ckpt", "epoch=1-step=2-v1.ckpt", "last-v1.ckpt"}
    assert trainer.checkpoint_callback.best_model_path == str(tmp_path / "epoch=1-step=2-v1.ckpt")
    assert trainer.checkpoint_callback.last_model_path == str(tmp_path / "last-v1.ckpt")
    assert plugin.save_checkpoint.call_count == 4 and plugin.remove_checkpoint.call_count == 1
    trainer.test(BoringModel(), ckpt_path=checkpoint.last_model_path)
    plugin.load_checkpoint.assert_called_once()
    plugin.load_checkpoint.assert_called_with(str(tmp_path / "last-v1.ckpt"), weights_only=None)


def test_async_checkpoint_plugin(tmp_path):
    plugin = AsyncCheckpointIO()
    plugin.save_checkpoint = Mock(wraps=plugin.save_checkpoint)
    plugin.remove_checkpoint = Mock(wraps=plugin.remove_checkpoint)

    class CustomBoringModel(BoringModel):
        def on_fit_start(self):
            base = self.trainer.strategy.checkpoint_io.checkpoint_io
            base.save_checkpoint = Mock(wraps=base.save_checkpoint)
            base.remove_checkpoint = Mock(wraps=base.remove_checkpoint)

    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_top_k=2, monitor="step", mode="max")
    trainer = Trainer(default_root_dir=tmp_path, plugins=[plugin], callbacks=checkpoint, max_epochs=3,
                      limit_train_batches=1, limit_val_batches=0, enable_progress_bar=False,
                      enable_model_summary=False)
    model = CustomBoringModel()
    trainer.validate(model)  # a run before fit, so the writer is used across runs
    trainer.fit(model)
    assert plugin.save_checkpoint.call_count == 3 and plugin.remove_checkpoint.call_count == 1
    base = trainer.strategy.checkpoint_io.checkpoint_io
    assert base.save_checkpoint.call_count == 3 and base.remove_checkpoint.call_count == 1


def test_wrapped_checkpoint_io_keeps_what_it_wraps():
    base = TorchCheckpointIO()
    wrapped = AsyncCheckpointIO(base)
    outer = AsyncCheckpointIO(wrapped)
    assert outer.checkpoint_io is wrapped and outer.checkpoint_io.checkpoint_io is base
    outer = AsyncCheckpointIO(AsyncCheckpointIO())
    trainer = Trainer(accelerator="cpu", plugins=[outer])
    assert trainer.strategy.checkpoint_io is outer
    assert isinstance(outer.checkpoint_io.checkpoint_io, TorchCheckpointIO)


@mock.patch.dict(os.environ, {"SLURM_NODELIST": "1.1.1.1, 1.1.1.2", "SLURM_JOB_ID": "0001234", "SLURM_NTASKS": "20",
                              "SLURM_LOCALID": "2", "SLURM_PROCID": "1", "SLURM_NODEID": "3",
                              "SLURM_JOB_NAME": "JOB"})
def test_slurm_attributes_from_environment_variables():
    env = SLURMEnvironment()
    assert env.auto_requeue is True and env.creates_processes_externally
    assert env.main_address == "1.1.1.1" and env.main_port == 15000 + 1234
    assert env.job_id() == 1234 and env.job_name() == "JOB"
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (20, 1, 2, 3)
    env.set_global_rank(100)
    env.set_world_size(100)
    assert env.global_rank() == 1 and env.world_size() == 20  # the launcher's, not what is set


@pytest.mark.parametrize(("node_list", "expected"), [
    ("alpha,beta,gamma", "alpha"), ("alpha beta gamma", "alpha"), ("1.2.3.[100-110]", "1.2.3.100")])
def test_slurm_main_address_from_node_list(node_list, expected):
    with mock.patch.dict(os.environ, {"SLURM_NODELIST": node_list}):
        assert SLURMEnvironment().main_address == expected


def test_slurm_detect():
    with mock.patch.dict(os.environ, {}, clear=True):
        assert not SLURMEnvironment.detect()
    with mock.patch.dict(os.environ, {"SLURM_NTASKS": "2"}):
        assert SLURMEnvironment.detect()
    with mock.patch.dict(os.environ, {"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "bash"}):
        assert not SLURMEnvironment.detect()


def test_slurm_requeue_signal():
    assert SLURMEnvironment(auto_requeue=False, requeue_signal=signal.SIGUSR2).requeue_signal == signal.SIGUSR2
    assert SLURMEnvironment().requeue_signal == signal.SIGUSR1


@mock.patch.dict(os.environ, {}, clear=True)
def test_lightning_environment_default_attributes():
    env = LightningEnvironment()
    assert not env.creates_processes_externally
    assert env.main_address == "127.0.0.1" and env.main_port == env.main_port > 0  # a free port, kept
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (1, 0, 0, 0)
    env.set_world_size(4)
    env.set_global_rank(3)
    assert (env.world_size(), env.global_rank()) == (4, 3)


@mock.patch.dict(os.environ, {"MASTER_ADDR": "1.2.3.4", "MASTER_PORT": "500", "LOCAL_RANK": "2", "NODE_RANK": "3"})
def test_lightning_environment_attributes_from_environment_variables():
    env = LightningEnvironment()
    assert env.creates_processes_externally
    assert (env.main_address, env.main_port, env.local_rank(), env.node_rank()) == ("1.2.3.4", 500, 2, 3)


@mock.patch.dict(os.environ, {"MASTER_ADDR": "1.2.3.4", "MASTER_PORT": "500", "LOCAL_RANK": "2", "GROUP_RANK": "3",
                              "RANK": "1", "WORLD_SIZE": "20"})
def test_torchelastic_attributes_from_environment_variables():
    env = TorchElasticEnvironment()
    assert env.creates_processes_externally and TorchElasticEnvironment.detect()
    assert (env.main_address, env.main_port) == ("1.2.3.4", 500)
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.node_rank()) == (20, 1, 2, 3)


def test_double_precision_trains_in_float64(tmp_path):
    class DoubleModel(BoringModel):
        def training_step(self, batch, batch_idx):
            assert batch.dtype == torch.float64 and self.layer.weight.dtype == torch.float64
            return super().training_step(batch, batch_idx)

    trainer = Trainer(default_root_dir=tmp_path, accelerator="cpu", plugins=[DoublePrecision()], fast_dev_run=2)
    trainer.fit(DoubleModel())
    assert isinstance(trainer.precision_plugin, DoublePrecision)


@pytest.mark.parametrize(("plugin", "precision"), [
    (lambda: MixedPrecision("bf16-mixed", "cpu"), "bf16-mixed"),
    (lambda: HalfPrecision("bf16-true"), "bf16-true"),
])
def test_precision_plugins_select_the_precision(plugin, precision):
    trainer = Trainer(accelerator="cpu", plugins=[plugin()])
    assert trainer.precision == precision
