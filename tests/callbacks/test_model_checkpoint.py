"""ModelCheckpoint: top-k on a known metric sequence, the save triggers, file names, state, faults."""

from __future__ import annotations

import copy
import importlib.util
import os
import pickle
from datetime import timedelta

import fsspec
import pytest
import torch

import framework
from framework.callbacks import ModelCheckpoint
from framework.errors import MisconfigurationError
from framework.testing import spawn
from tests.helpers import RecordingLogger, Regressor, loader, quiet_trainer


class Scripted(Regressor):
    """Logs ``score`` = scores[epoch] in validation, whatever the model does."""

    def __init__(self, scores):
        super().__init__()
        self.scores = scores

    def validation_step(self, batch, batch_idx):
        self.log("score", float(self.scores[self.current_epoch]))


class ListsFiles(framework.Callback):
    """After the checkpoint callback of each epoch ran, what its directory holds (read at the next epoch)."""

    def __init__(self, checkpoint):
        self.checkpoint = checkpoint
        self.after_epoch: list[list[str]] = []

    def _list(self):
        fs, inner = fsspec.core.url_to_fs(self.checkpoint.dirpath)
        return sorted(os.path.basename(p) for p in fs.ls(inner, detail=False)) if fs.exists(inner) else []

    def on_train_epoch_start(self, trainer, module):
        if trainer.current_epoch:
            self.after_epoch.append(self._list())

    def on_train_end(self, trainer, module):
        self.after_epoch.append(self._list())


def fit(scores, checkpoint, **kwargs):
    lister = ListsFiles(checkpoint)
    trainer = quiet_trainer(max_epochs=len(scores), callbacks=[lister, checkpoint], enable_checkpointing=True,
                            limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0, **kwargs)
    trainer.fit(Scripted(scores), loader(), loader(n=8))
    return trainer, lister.after_epoch


def names(paths):
    return sorted(os.path.basename(p) for p in paths)


def test_top_k_keeps_the_k_best_files_after_each_epoch(memory_root):
    checkpoint = ModelCheckpoint(dirpath=memory_root, monitor="score", save_top_k=2, filename="{epoch}-{score:.1f}")
    _, after_epoch = fit([5, 3, 4, 1, 2], checkpoint)
    assert after_epoch == [
        ["epoch=0-score=5.0.ckpt"],
        ["epoch=0-score=5.0.ckpt", "epoch=1-score=3.0.ckpt"],
        ["epoch=1-score=3.0.ckpt", "epoch=2-score=4.0.ckpt"],
        ["epoch=1-score=3.0.ckpt", "epoch=3-score=1.0.ckpt"],
        ["epoch=3-score=1.0.ckpt", "epoch=4-score=2.0.ckpt"],
    ]
    assert checkpoint.best_model_path.endswith("epoch=3-score=1.0.ckpt")
    assert checkpoint.best_model_score.item() == 1.0
    assert checkpoint.kth_best_model_path.endswith("epoch=4-score=2.0.ckpt") and checkpoint.kth_value.item() == 2.0
    assert names(checkpoint.best_k_models) == ["epoch=3-score=1.0.ckpt", "epoch=4-score=2.0.ckpt"]
    with fsspec.open(checkpoint.best_model_path, "rb") as handle:  # the best file holds epoch 3's state
        assert torch.load(handle, weights_only=True)["epoch"] == 3


def test_mode_max_keeps_the_highest():
    checkpoint = ModelCheckpoint(dirpath="ckpts", monitor="score", mode="max", save_top_k=1, filename="{epoch}")
    _, after_epoch = fit([1, 3, 2], checkpoint)
    assert after_epoch == [["epoch=0.ckpt"], ["epoch=1.ckpt"], ["epoch=1.ckpt"]]


def test_save_top_k_minus_one_keeps_everything_and_zero_nothing_but_last():
    _, after_epoch = fit([3, 2, 1], ModelCheckpoint(dirpath="all", monitor="score", save_top_k=-1, filename="{epoch}"))
    assert after_epoch[-1] == ["epoch=0.ckpt", "epoch=1.ckpt", "epoch=2.ckpt"]
    checkpoint = ModelCheckpoint(dirpath="none", monitor="score", save_top_k=0, save_last=True)
    _, after_epoch = fit([3, 2, 1], checkpoint)
    assert after_epoch == [["last.ckpt"]] * 3 and checkpoint.best_model_path == ""


def test_without_a_monitor_the_latest_file_is_kept():
    checkpoint = ModelCheckpoint(dirpath="latest")
    trainer, after_epoch = fit([0, 0, 0], checkpoint)
    assert after_epoch == [["epoch=0-step=2.ckpt"], ["epoch=1-step=4.ckpt"], ["epoch=2-step=6.ckpt"]]
    assert checkpoint.best_model_path.endswith("epoch=2-step=6.ckpt")


def test_save_last_writes_last_ckpt_of_the_latest_state():
    checkpoint = ModelCheckpoint(dirpath="last", monitor="score", save_last=True)
    trainer, after_epoch = fit([1, 5, 6], checkpoint)
    assert after_epoch[-1] == ["epoch=0-step=2.ckpt", "last.ckpt"]
    assert torch.load(checkpoint.last_model_path, weights_only=True)["global_step"] == 6


def test_save_last_does_not_wait_for_a_top_k_file():
    """Lightning 2.6 writes last.ckpt only beside a top-k file; ours is the latest state at every save point."""
    checkpoint = ModelCheckpoint(dirpath="ep0", every_n_epochs=0, save_last=True)
    _, after_epoch = fit([0, 0], checkpoint)
    assert after_epoch == [["last.ckpt"], ["last.ckpt"]]
    assert torch.load(checkpoint.last_model_path, weights_only=True)["global_step"] == 4
    steps = ModelCheckpoint(dirpath="steps_last", every_n_train_steps=3, save_last=True, filename="{step}")
    fit([0, 0], steps)  # 2 batches an epoch: step 3 by steps, epoch ends at steps 2 and 4 update last
    assert names(os.listdir("steps_last")) == ["last.ckpt", "step=3.ckpt"]
    assert torch.load(steps.last_model_path, weights_only=True)["global_step"] == 4


def test_save_last_link_points_at_the_newest_file():
    checkpoint = ModelCheckpoint(dirpath="link", save_last="link", filename="{epoch}")
    fit([0, 0], checkpoint)
    last = os.path.join("link", "last.ckpt")
    assert os.path.islink(last) and os.readlink(last) == "epoch=1.ckpt"
    assert names(os.listdir("link")) == ["epoch=1.ckpt", "last.ckpt"]
    assert torch.load(last, weights_only=True)["global_step"] == 4
    sparse = ModelCheckpoint(dirpath="sparse", save_last="link", every_n_epochs=2, filename="{epoch}")
    _, after_epoch = fit([0, 0, 0], sparse)  # no epoch=2 file: last.ckpt becomes a file of its own there
    last = os.path.join("sparse", "last.ckpt")
    assert not os.path.islink(last) and torch.load(last, weights_only=True)["global_step"] == 6
    assert after_epoch[-1] == ["epoch=1.ckpt", "last.ckpt"]


def test_save_on_exception_keeps_the_state_reached():
    class Crashes(Scripted):
        def training_step(self, batch, batch_idx):
            if self.current_epoch == 1 and batch_idx == 1:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    checkpoint = ModelCheckpoint(dirpath="exc", save_on_exception=True, filename="{epoch}-{step}", save_top_k=-1)
    trainer = quiet_trainer(max_epochs=3, callbacks=[checkpoint], enable_checkpointing=True, limit_train_batches=2,
                            num_sanity_val_steps=0)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Crashes([0, 0, 0]), loader(), loader(n=8))
    assert names(os.listdir("exc")) == ["epoch=0-step=2.ckpt", "epoch=1-step=3.ckpt"]
    assert torch.load(os.path.join("exc", "epoch=1-step=3.ckpt"), weights_only=True)["global_step"] == 3


def test_every_n_train_steps_saves_inside_the_epoch():
    checkpoint = ModelCheckpoint(dirpath="steps", every_n_train_steps=3, save_top_k=-1, filename="{step}")
    trainer = quiet_trainer(max_epochs=2, callbacks=[checkpoint], enable_checkpointing=True, limit_train_batches=4)
    trainer.fit(Regressor(), loader())
    assert names(os.listdir("steps")) == ["step=3.ckpt", "step=6.ckpt"]


def test_every_n_epochs_saves_every_other_epoch():
    checkpoint = ModelCheckpoint(dirpath="epochs", every_n_epochs=2, save_top_k=-1, filename="{epoch}")
    _, after_epoch = fit([0, 0, 0, 0], checkpoint)
    assert after_epoch[-1] == ["epoch=1.ckpt", "epoch=3.ckpt"]


def test_train_time_interval_saves_when_the_interval_has_passed():
    checkpoint = ModelCheckpoint(dirpath="timed", train_time_interval=timedelta(microseconds=1), save_top_k=-1,
                                 filename="{step}")
    trainer = quiet_trainer(max_epochs=1, callbacks=[checkpoint], enable_checkpointing=True, limit_train_batches=3)
    trainer.fit(Regressor(), loader())
    assert names(os.listdir("timed")) == ["step=1.ckpt", "step=2.ckpt", "step=3.ckpt"]
    checkpoint = ModelCheckpoint(dirpath="hourly", train_time_interval=timedelta(hours=1))
    quiet_trainer(max_epochs=1, callbacks=[checkpoint], enable_checkpointing=True, limit_train_batches=3).fit(
        Regressor(), loader())
    assert not os.path.exists("hourly") or os.listdir("hourly") == []


def test_validation_inside_the_epoch_saves_after_each_validation():
    checkpoint = ModelCheckpoint(dirpath="val", monitor="val_loss", save_top_k=-1, filename="{step}")
    trainer = quiet_trainer(max_epochs=1, callbacks=[checkpoint], enable_checkpointing=True, val_check_interval=0.5,
                            num_sanity_val_steps=0)
    trainer.fit(Regressor(), loader(), loader(n=8))
    assert names(os.listdir("val")) == ["step=4.ckpt", "step=8.ckpt"]


def test_default_directory_is_the_loggers_checkpoints_folder_or_the_root():
    trainer = quiet_trainer(max_epochs=1, enable_checkpointing=True, logger=framework.loggers.CSVLogger("logs"))
    trainer.fit(Regressor(), loader())
    assert trainer.checkpoint_callback.dirpath == os.path.join("logs", "lightning_logs", "version_0", "checkpoints")
    assert os.listdir(trainer.checkpoint_callback.dirpath) == ["epoch=0-step=8.ckpt"]
    trainer = quiet_trainer(max_epochs=1, enable_checkpointing=True, default_root_dir="root")
    trainer.fit(Regressor(), loader())
    assert trainer.checkpoint_callback.dirpath == os.path.join("root", "checkpoints")


def test_with_several_loggers_the_checkpoints_go_to_the_first_loggers_folder_as_in_lightning():
    loggers = [framework.loggers.CSVLogger("a", name="csv"), framework.loggers.TensorBoardLogger("b", name="tb")]
    trainer = quiet_trainer(max_epochs=1, enable_checkpointing=True, logger=loggers, default_root_dir="root")
    trainer.fit(Regressor(), loader())
    # Lightning 2.6.6 gives <a>/csv/version_0/checkpoints here (observed), not the root's
    assert trainer.checkpoint_callback.dirpath == os.path.join("a", "csv", "version_0", "checkpoints")


def test_the_default_checkpoint_callback_saves_one_file_per_epoch_keeping_the_latest():
    trainer = quiet_trainer(max_epochs=3, enable_checkpointing=True)
    assert [type(cb).__name__ for cb in trainer.callbacks] == ["ModelCheckpoint"]
    trainer.fit(Regressor(), loader())
    assert os.listdir("checkpoints") == ["epoch=2-step=24.ckpt"]


def test_a_monitor_that_is_never_logged_fails_naming_the_logged_keys():
    checkpoint = ModelCheckpoint(dirpath="missing", monitor="val_acc")
    with pytest.raises(MisconfigurationError, match=r"monitor='val_acc'.*could not find 'val_acc' in the logged "
                                                     r"metrics: \['score', 'train_loss'\]"):
        fit([1, 2], checkpoint)


def test_a_monitor_not_logged_yet_before_validation_only_warns():
    checkpoint = ModelCheckpoint(dirpath="early", monitor="score", every_n_train_steps=1, save_top_k=2,
                                 filename="{step}")
    trainer = quiet_trainer(max_epochs=2, callbacks=[checkpoint], enable_checkpointing=True, limit_train_batches=2,
                            limit_val_batches=1, num_sanity_val_steps=0)
    with pytest.warns(UserWarning, match="could not find 'score'"):
        trainer.fit(Scripted([4.0, 5.0]), loader(), loader(n=8))
    # steps 1 and 2 come before the first validation; from step 3 on the metric exists
    assert names(checkpoint.best_k_models) == ["step=3.ckpt", "step=4.ckpt"]


def test_a_crash_leaves_the_saved_files_intact_and_loadable():
    class Crashes(Scripted):
        def training_step(self, batch, batch_idx):
            if self.current_epoch == 3:
                raise RuntimeError("out of memory, say")
            return super().training_step(batch, batch_idx)

    checkpoint = ModelCheckpoint(dirpath="crash", monitor="score", save_top_k=2, save_last=True, filename="{epoch}")
    trainer = quiet_trainer(max_epochs=5, callbacks=[checkpoint], enable_checkpointing=True, limit_train_batches=2,
                            num_sanity_val_steps=0)
    with pytest.raises(RuntimeError, match="out of memory"):
        trainer.fit(Crashes([3, 1, 2, 0, 0]), loader(), loader(n=8))
    assert names(os.listdir("crash")) == ["epoch=1.ckpt", "epoch=2.ckpt", "last.ckpt"]
    for name in os.listdir("crash"):
        assert "state_dict" in torch.load(os.path.join("crash", name), weights_only=True)
    assert torch.load(os.path.join("crash", "last.ckpt"), weights_only=True)["epoch"] == 2


def test_state_dict_round_trip_and_resume_keep_the_ranking():
    checkpoint = ModelCheckpoint(dirpath="resume", monitor="score", save_top_k=2, filename="{epoch}")
    fit([5, 3, 4], checkpoint)
    state = checkpoint.state_dict()
    again = ModelCheckpoint(dirpath="resume", monitor="score", save_top_k=2, filename="{epoch}")
    again.load_state_dict(state)
    assert again.state_dict().keys() == state.keys()
    assert again.best_k_models == checkpoint.best_k_models and again.best_model_path == checkpoint.best_model_path
    # Resumed from its last file, a new run ranks against the same files: epoch 3 (score 1) replaces epoch 2 (4).
    resumed = ModelCheckpoint(dirpath="resume", monitor="score", save_top_k=2, filename="{epoch}")
    trainer = quiet_trainer(max_epochs=4, callbacks=[resumed], enable_checkpointing=True, limit_train_batches=2,
                            limit_val_batches=1, num_sanity_val_steps=0)
    with pytest.warns(UserWarning, match="exists and holds checkpoints"):
        trainer.fit(Scripted([5, 3, 4, 1]), loader(), loader(n=8), ckpt_path=os.path.join("resume", "epoch=2.ckpt"))
    assert names(os.listdir("resume")) == ["epoch=1.ckpt", "epoch=2.ckpt", "epoch=3.ckpt"]  # resumed-from file stays
    assert names(resumed.best_k_models) == ["epoch=1.ckpt", "epoch=3.ckpt"]


def test_a_changed_dirpath_restores_only_best_model_path_with_a_warning():
    saved = ModelCheckpoint(dirpath="old", monitor="score", save_top_k=2, save_last=True, filename="{epoch}")
    fit([5, 3, 4], saved)
    state = saved.state_dict()
    explicit = ModelCheckpoint(dirpath="new", monitor="score", save_top_k=2)
    by_setup = ModelCheckpoint(monitor="score", save_top_k=2)  # its dirpath is the default, decided by setup
    by_setup.setup(quiet_trainer(default_root_dir="root"), Regressor(), "fit")
    for moved in (explicit, by_setup):
        with pytest.warns(UserWarning, match=r"The dirpath has changed from '.*old' to '.*(new|checkpoints)': only "
                                             r"best_model_path is restored"):
            moved.load_state_dict(state)
        assert moved.best_model_path == state["best_model_path"]
        assert (moved.best_k_models, moved.kth_best_model_path, moved.last_model_path) == ({}, "", "")
        assert moved.best_model_score is None and moved.kth_value == float("inf")
    # Resumed into another directory, the run saves its own top k and deletes none of the old files.
    resumed = ModelCheckpoint(dirpath="new", monitor="score", save_top_k=1, filename="{epoch}")
    trainer = quiet_trainer(max_epochs=4, callbacks=[resumed], enable_checkpointing=True, limit_train_batches=2,
                            limit_val_batches=1, num_sanity_val_steps=0)
    with pytest.warns(UserWarning, match="The dirpath has changed"):
        trainer.fit(Scripted([5, 3, 4, 9]), loader(), loader(n=8), ckpt_path=saved.last_model_path)
    assert names(os.listdir("old")) == ["epoch=1.ckpt", "epoch=2.ckpt", "last.ckpt"]
    assert names(os.listdir("new")) == ["epoch=3.ckpt"]


def test_a_pickle_or_copy_of_the_callback_equals_it_and_still_saves_in_the_background():
    serialisers = [pickle] + ([importlib.import_module("cloudpickle")] if importlib.util.find_spec("cloudpickle")
                              else [])
    for checkpoint in (ModelCheckpoint(dirpath="d"), ModelCheckpoint(dirpath="a", async_save=True, save_last=True)):
        for serialiser in serialisers:
            assert vars(serialiser.loads(serialiser.dumps(checkpoint))) == vars(checkpoint)
        assert vars(copy.deepcopy(checkpoint)) == vars(checkpoint)
    copied = pickle.loads(pickle.dumps(checkpoint))  # as each rank gets it from a spawning Trainer
    fit([0, 0], copied)
    assert names(os.listdir("a")) == ["epoch=1-step=4.ckpt", "last.ckpt"]
    assert torch.load(copied.last_model_path, weights_only=True)["global_step"] == 4


class CountsTorchSave(ModelCheckpoint):
    """Counts the calls of torch.save on its rank from the start of training (Lightning's
    test_model_checkpoint_no_extraneous_invocations)."""

    def on_train_start(self, trainer, pl_module):
        super().on_train_start(trainer, pl_module)
        self.calls, original = 0, torch.save

        def counting(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        torch.save = counting


def _count_torch_saves(rank: int, directory: str) -> tuple[int, int]:
    checkpoint = CountsTorchSave(dirpath=directory, monitor="score", save_top_k=-1)
    trainer = quiet_trainer(devices=2, strategy="ddp", max_epochs=3, callbacks=[checkpoint], enable_checkpointing=True,
                            limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0)
    trainer.fit(Scripted([3, 2, 1]), loader(), loader(n=8))
    return checkpoint.calls, len(checkpoint.best_k_models)


def test_on_two_ranks_torch_save_writes_the_checkpoints_on_rank_zero_only(tmp_path):
    # The ranks exchange metrics and random states holding tensors; pickled as pickle does it, each tensor would
    # go through torch.save too (see framework.io.pickling).
    assert spawn(2, _count_torch_saves, str(tmp_path / "ckpts")) == [(3, 3), (0, 3)]
    assert len(os.listdir(tmp_path / "ckpts")) == 3


def test_two_checkpoint_callbacks_with_different_monitors_keep_separate_state():
    by_score = ModelCheckpoint(dirpath="a", monitor="score", filename="{epoch}")
    by_loss = ModelCheckpoint(dirpath="b", monitor="train_loss", filename="{epoch}")
    trainer = quiet_trainer(max_epochs=2, callbacks=[by_score, by_loss], enable_checkpointing=True,
                            limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0)
    trainer.fit(Scripted([2, 1]), loader(), loader(n=8))
    trainer.save_checkpoint("both.ckpt")
    saved = torch.load("both.ckpt", weights_only=True)["callbacks"]
    assert set(saved) == {by_score.state_key, by_loss.state_key} and by_score.state_key != by_loss.state_key
    assert saved[by_score.state_key]["monitor"] == "score" and saved[by_loss.state_key]["monitor"] == "train_loss"


def test_best_and_last_checkpoints_are_loaded_by_name():
    checkpoint = ModelCheckpoint(dirpath="named", monitor="score", save_last=True, filename="{epoch}")
    trainer, _ = fit([1, 2, 3], checkpoint)
    best = Regressor.load_from_checkpoint(checkpoint.best_model_path)
    model = Regressor()
    trainer.validate(model, loader(n=8), ckpt_path="best", verbose=False)
    assert trainer.ckpt_path == checkpoint.best_model_path
    torch.testing.assert_close(model.net.weight, best.net.weight)
    trainer.validate(model, loader(n=8), ckpt_path="last", verbose=False)
    assert trainer.ckpt_path == checkpoint.last_model_path


def test_fast_dev_run_writes_no_checkpoint():
    trainer = quiet_trainer(fast_dev_run=True, enable_checkpointing=True)
    trainer.fit(Regressor(), loader(), loader(n=8))
    assert trainer.checkpoint_callback is not None and not os.path.exists("checkpoints")


def test_verbose_says_what_it_saved(caplog):
    checkpoint = ModelCheckpoint(dirpath="loud", monitor="score", verbose=True, filename="{epoch}")
    with caplog.at_level("INFO", logger="framework"):
        fit([2, 3], checkpoint)
    messages = [r.getMessage() for r in caplog.records]
    assert any("'score' reached 2.00000 (best 2.00000), saving model to" in m for m in messages)
    assert any("'score' was not in top 1" in m for m in messages)


def test_loggers_hear_of_each_saved_checkpoint():
    class Hears(RecordingLogger):
        def __init__(self):
            super().__init__()
            self.saved: list[str] = []

        def after_save_checkpoint(self, checkpoint_callback):
            self.saved.append(os.path.basename(checkpoint_callback.best_model_path))

    logger = Hears()
    checkpoint = ModelCheckpoint(dirpath="heard", filename="{epoch}")
    quiet_trainer(max_epochs=2, logger=logger, callbacks=[checkpoint], enable_checkpointing=True).fit(
        Regressor(), loader())
    assert logger.saved == ["epoch=0.ckpt", "epoch=1.ckpt"]
