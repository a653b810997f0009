"""Checkpoints written in the background (``ModelCheckpoint(async_save=True)``,
``Trainer(plugins=[AsyncCheckpointIO()])``): training goes on during the write, the file holds the state of its
save point, one save is in flight at a time, a failed or killed write leaves the earlier checkpoints loadable, the
ranks agree on a failure, zero3's sharded saves match the synchronous ones.

The writes are held or failed by ``gated://``, a local filesystem whose checkpoint writes the tests control.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import fsspec
import pytest
import torch
from fsspec.implementations.local import LocalFileOpener, LocalFileSystem

import framework
from framework.callbacks import Callback, ModelCheckpoint
from framework.errors import CheckpointError, MisconfigurationError
from framework.io import AsyncCheckpointIO, load_checkpoint
from framework.io.checkpoint_storage import save_checkpoint
from framework.io.staging import Stager
from framework.testing import spawn
from tests.helpers import RecordingLogger, Regressor, loader, quiet_trainer
from tests.io.planting import assert_every_member_refuses_a_payload

REPOSITORY = Path(__file__).resolve().parents[2]


class Writes:
    """What ``gated://`` does with the write of a checkpoint named in ``hold`` / ``fail``, and what happened."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.hold: set[str] = set()  # held after their first bytes until ``release`` is set
        self.fail: set[str] = set()  # fail after their first bytes
        self.release = threading.Event()
        self.marker: str | None = None  # a file created when a held write starts (for another process to see)


WRITES = Writes()


class GatedFile(LocalFileOpener):
    def write(self, data):
        target = os.path.basename(self.path).split(".tmp-")[0]
        if ".tmp-" in os.path.basename(self.path) and not getattr(self, "announced", False):
            self.announced = True
            WRITES.events.append(f"write started {target}")
            written = super().write(data)
            if target in WRITES.fail:
                raise OSError(f"disk full while writing {target}")
            if target in WRITES.hold:
                if WRITES.marker:
                    Path(WRITES.marker).touch()
                WRITES.release.wait(timeout=30)  # a guard: a synchronous save would wait here for nothing
            return written
        return super().write(data)

    def __exit__(self, *exc):
        super().__exit__(*exc)
        if getattr(self, "announced", False):
            WRITES.events.append(f"write finished {os.path.basename(self.path).split('.tmp-')[0]}")


class GatedFileSystem(LocalFileSystem):
    protocol = ("gated",)

    def _open(self, path, mode="rb", block_size=None, **kwargs):
        path = self._strip_protocol(path)
        if "w" in mode:
            self.makedirs(self._parent(path), exist_ok=True)
        return GatedFile(path, mode, fs=self, **kwargs)


fsspec.register_implementation("gated", GatedFileSystem, clobber=True)


@pytest.fixture(autouse=True)
def _fresh_writes():
    global WRITES
    WRITES = Writes()
    yield


class Records(Callback):
    """The weights after each step, and when a step ended among the writes' events."""

    def __init__(self, release_at_step: int | None = None) -> None:
        self.weights: dict[int, dict[str, torch.Tensor]] = {}
        self.release_at_step = release_at_step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.weights[trainer.global_step] = {k: v.clone() for k, v in module.state_dict().items()}
        WRITES.events.append(f"step {trainer.global_step} done")
        if trainer.global_step == self.release_at_step:
            WRITES.release.set()


class ChecksFilesWhenTold(RecordingLogger):
    def __init__(self) -> None:
        super().__init__()
        self.complete_when_told: list[bool] = []

    @property
    def save_dir(self):
        return None

    def after_save_checkpoint(self, checkpoint_callback):
        self.complete_when_told.append(fsspec.core.url_to_fs(checkpoint_callback.best_model_path)[0].exists(
            fsspec.core.url_to_fs(checkpoint_callback.best_model_path)[1]))


def test_training_goes_on_while_the_checkpoint_is_written_and_the_file_holds_its_save_points_state(tmp_path):
    WRITES.hold = {"epoch=0-step=2.ckpt"}
    records, logger = Records(release_at_step=3), ChecksFilesWhenTold()
    checkpoint = ModelCheckpoint(dirpath=f"gated://{tmp_path}", every_n_train_steps=2, save_top_k=-1, async_save=True)
    trainer = quiet_trainer(max_steps=4, callbacks=[records, checkpoint], enable_checkpointing=True, logger=logger)
    trainer.fit(Regressor(), loader())

    events = WRITES.events
    # step 3 ran (and changed the weights in place) before the file of step 2 was complete: its write is held
    # until then, and a save that kept training waiting would have run into the guard's timeout first
    finished = events.index("write finished epoch=0-step=2.ckpt")
    assert events.index("step 2 done") < events.index("step 3 done") < finished
    saved = load_checkpoint(tmp_path / "epoch=0-step=2.ckpt")
    assert saved["global_step"] == 2
    for name, value in records.weights[2].items():
        torch.testing.assert_close(saved["state_dict"][name], value, rtol=0, atol=0)
    assert not torch.equal(records.weights[2]["net.weight"], records.weights[3]["net.weight"])
    assert load_checkpoint(tmp_path / "epoch=0-step=4.ckpt")["global_step"] == 4  # complete when fit returned
    assert logger.complete_when_told == [True, True]  # the loggers heard of each file once it was complete


def test_a_save_point_waits_for_the_write_in_flight_before_copying_the_new_state(tmp_path):
    WRITES.hold = {"first.ckpt"}
    writer, weight = AsyncCheckpointIO(), torch.ones(1000)
    with writer.save_point():
        save_checkpoint({"weight": weight}, f"gated://{tmp_path}/first.ckpt")
    weight.fill_(2.0)  # what the next save point copies, into the same staging memory

    def second_save_point():
        with writer.save_point():
            WRITES.events.append("second save point entered")
            save_checkpoint({"weight": weight}, f"gated://{tmp_path}/second.ckpt")

    second = threading.Thread(target=second_save_point)
    second.start()
    second.join(timeout=0.5)  # room for a save point that did not wait to enter (and overwrite the staging)
    WRITES.release.set()
    second.join()
    writer.wait()

    assert WRITES.events.index("write finished first.ckpt") < WRITES.events.index("second save point entered")
    assert torch.equal(torch.load(tmp_path / "first.ckpt")["weight"], torch.ones(1000))
    assert torch.equal(torch.load(tmp_path / "second.ckpt")["weight"], torch.full((1000,), 2.0))


def test_a_failed_background_write_is_raised_naming_the_file_and_the_files_before_it_stay(tmp_path):
    WRITES.fail = {"epoch=0-step=4.ckpt"}
    checkpoint = ModelCheckpoint(dirpath=f"gated://{tmp_path}", every_n_train_steps=2, async_save=True)
    trainer = quiet_trainer(max_steps=6, callbacks=[checkpoint], enable_checkpointing=True)
    with pytest.raises(CheckpointError, match=r"epoch=0-step=4\.ckpt.*disk full"):
        trainer.fit(Regressor(), loader())
    # raised at the next save point (step 6), before it saved anything
    assert sorted(os.listdir(tmp_path)) == ["epoch=0-step=2.ckpt"]  # kept: the file replacing it never completed
    assert load_checkpoint(tmp_path / "epoch=0-step=2.ckpt")["global_step"] == 2


def _train_until_killed(directory: str, marker: str) -> None:
    """Run in another process: train, saving every 2 steps in the background; the write of step 4 hangs."""
    WRITES.hold, WRITES.marker = {"epoch=0-step=4.ckpt"}, marker
    checkpoint = ModelCheckpoint(dirpath=f"gated://{directory}", every_n_train_steps=2, save_last=True,
                                 async_save=True)
    quiet_trainer(max_steps=100, callbacks=[checkpoint], enable_checkpointing=True).fit(
        Regressor(), loader(n=8 * 100))


def test_a_process_killed_mid_write_leaves_the_previous_checkpoints_loadable(tmp_path):
    marker, directory = tmp_path / "writing", tmp_path / "checkpoints"
    code = ("from tests.callbacks.test_async_checkpoint import _train_until_killed; "
            f"_train_until_killed({str(directory)!r}, {str(marker)!r})")
    process = subprocess.Popen([sys.executable, "-c", code], cwd=REPOSITORY, stderr=subprocess.PIPE)
    try:
        while not marker.exists():
            assert process.poll() is None, process.stderr.read().decode()[-3000:]
            threading.Event().wait(0.05)
    finally:
        process.kill()
        process.communicate(timeout=60)

    names = sorted(os.listdir(directory))
    assert [name for name in names if ".tmp-" not in name] == ["epoch=0-step=2.ckpt", "last.ckpt"]
    assert any(name.startswith("epoch=0-step=4.ckpt.tmp-") for name in names)  # the unfinished write
    for name in ("epoch=0-step=2.ckpt", "last.ckpt"):
        assert load_checkpoint(directory / name)["global_step"] == 2
    ModelCheckpoint(dirpath=directory, async_save=True).setup(quiet_trainer(), Regressor(), "fit")
    assert sorted(os.listdir(directory)) == ["epoch=0-step=2.ckpt", "last.ckpt"]  # the next run removes it


class SavesByHand(Callback):
    def __init__(self, path: str) -> None:
        self.path = path
        self.found: list[bool] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == 1:
            trainer.save_checkpoint(self.path)
            self.found.append(os.path.exists(self.path))


def test_the_trainer_takes_async_checkpoint_io_as_a_plugin_and_refuses_others(tmp_path):
    writer = AsyncCheckpointIO()
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=1, save_top_k=2, monitor="step",
                                 mode="max", save_last="link")
    by_hand = SavesByHand(str(tmp_path / "by_hand.ckpt"))
    trainer = quiet_trainer(max_steps=4, callbacks=[by_hand, checkpoint], enable_checkpointing=True,
                            plugins=[writer])
    trainer.fit(Regressor(), loader())
    assert checkpoint._saves.writer is writer and trainer.checkpoint_io is writer
    assert by_hand.found == [True]  # trainer.save_checkpoint by the user stays synchronous
    files = sorted(os.listdir(tmp_path / "ckpts"))
    assert len(files) == 3 and "last.ckpt" in files  # the two best, and last linking the newest
    assert os.path.realpath(tmp_path / "ckpts" / "last.ckpt") == str(tmp_path / "ckpts" / "epoch=0-step=4.ckpt")
    assert set(checkpoint.best_k_models) == {str(tmp_path / "ckpts" / name) for name in files if name != "last.ckpt"}

    with pytest.raises(MisconfigurationError, match=r"plugins=\['bf16'\].*'bf16'.* is not a plugin.*AsyncCheckpointIO"):
        quiet_trainer(plugins=["bf16"])
    with pytest.raises(MisconfigurationError, match=r"plugins=.* holds two checkpoint_io plugins"):
        quiet_trainer(plugins=[AsyncCheckpointIO(), AsyncCheckpointIO()])
    with pytest.raises(MisconfigurationError, match=r"async_save='yes'"):
        ModelCheckpoint(async_save="yes")


def test_staging_copies_each_memory_once_and_reuses_its_buffers():
    weight = torch.arange(6.0).reshape(2, 3)
    stager = Stager()
    with stager.staging():
        first = stager.stage({"weight": weight, "tied": weight.detach(), "nested": [weight.t()], "step": 3})
    assert first["tied"] is first["weight"] and first["nested"][0] is not first["weight"] and first["step"] == 3
    weight.add_(1)
    assert torch.equal(first["weight"], torch.arange(6.0).reshape(2, 3))  # a copy, not the live tensor
    with stager.staging():
        second = stager.stage({"weight": weight, "tied": weight, "nested": [weight.t()], "step": 4})
    assert second["weight"] is first["weight"]  # the same memory, copied into again
    assert torch.equal(second["nested"][0], weight.t())


def _fail_rank_zeros_write(rank: int, directory: str) -> str:
    WRITES.fail = {"epoch=0-step=4.ckpt"} if rank == 0 else set()
    checkpoint = ModelCheckpoint(dirpath=f"gated://{directory}", every_n_train_steps=2, async_save=True)
    try:
        quiet_trainer(devices=2, strategy="ddp", max_steps=6, callbacks=[checkpoint],
                      enable_checkpointing=True).fit(Regressor(), loader())
    except CheckpointError as error:
        return str(error)
    return "no error"


def test_every_rank_raises_when_one_ranks_background_write_failed(tmp_path):
    rank_zero, rank_one = spawn(2, _fail_rank_zeros_write, str(tmp_path), timeout=30)
    assert "epoch=0-step=4.ckpt" in rank_zero and "disk full" in rank_zero
    assert "failed on another rank" in rank_one  # not left waiting in the next collective
    assert load_checkpoint(tmp_path / "epoch=0-step=2.ckpt")["global_step"] == 2


def _train_zero3(async_save: bool, directory: str) -> None:
    torch.manual_seed(0)
    checkpoint = ModelCheckpoint(dirpath=directory, monitor="train_loss", save_top_k=2, save_last=True,
                                 every_n_train_steps=2, async_save=async_save)
    trainer = quiet_trainer(devices=2, strategy="zero3", max_epochs=2, callbacks=[checkpoint],
                            enable_checkpointing=True)
    trainer.fit(Regressor(), loader())
    return checkpoint.best_model_path


def test_zero3_saves_in_the_background_the_same_sharded_checkpoints_as_in_the_foreground(tmp_path):
    best = {mode: _train_zero3(mode, str(tmp_path / str(mode))) for mode in (False, True)}
    assert os.path.basename(best[True]) == os.path.basename(best[False])
    names = sorted(os.listdir(tmp_path / "False"))
    assert sorted(os.listdir(tmp_path / "True")) == names and len(names) == 3  # top 2 and last, nothing left over
    for name in names:
        foreground, background = (load_checkpoint(tmp_path / mode / name) for mode in ("False", "True"))
        assert background["global_step"] == foreground["global_step"]
        for key in ("state_dict", "optimizer_states"):
            torch.testing.assert_close(background[key], foreground[key], rtol=0, atol=0, msg=f"{name} {key}")
    for mode in ("False", "True"):  # a payload in any member of either writer's directory runs nothing
        assert_every_member_refuses_a_payload(tmp_path / mode / "last.ckpt", tmp_path / f"planted-{mode}")


def test_a_runtime_takes_a_checkpoint_io_plugin_and_refuses_what_is_none():
    writer = AsyncCheckpointIO()
    assert framework.Runtime(accelerator="cpu", plugins=[writer]).strategy.checkpoint_io is writer
    with pytest.raises(MisconfigurationError, match=r"plugins=.*'ddp'.* is not a plugin"):
        framework.Runtime(accelerator="cpu", plugins="ddp")


def test_lightnings_import_paths_give_the_same_plugin():
    from framework.plugins import AsyncCheckpointIO as from_plugins
    from framework.plugins.io import AsyncCheckpointIO as from_plugins_io

    assert from_plugins is from_plugins_io is AsyncCheckpointIO
