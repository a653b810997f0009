"""Exact resume: a run interrupted at any checkpoint and resumed ends with the very weights of the uninterrupted run.

Shuffling on, dropout drawing from the global generator, momentum optimizers and a StepLR
schedule: the resumed run must see the same data order, the same random draws and the same
optimizer state. The resumed runs start from a different seed, so nothing matches by luck.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import framework
from framework.callbacks import ModelCheckpoint
from framework.trainer.checkpoint_contents import rng_state_of_rank
from framework.trainer.sampler import ResumableSampler, with_resumable_sampler
from tests.helpers import Regressor, quiet_trainer


class Noisy(framework.Module):
    """A regressor with dropout whose validation draws random numbers too."""

    def __init__(self, optimizer: str = "sgd"):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.3), nn.Linear(16, 1))
        self.seen: list[float] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(x.sum().item())
        return nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y) + 0 * torch.rand(()))

    def configure_optimizers(self):
        if self.hparams.optimizer == "sgd":
            optimizer = torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)
        else:
            optimizer = torch.optim.AdamW(self.parameters(), lr=0.01)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)]


def loaders():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(40, 4, generator=generator)
    y = x.sum(1, keepdim=True)
    return (DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True),  # 10 batches an epoch
            DataLoader(TensorDataset(x[:8], y[:8]), batch_size=4))


def fit(seed: int, ckpt_path: str | None = None, optimizer: str = "sgd", callbacks=()) -> Noisy:
    framework.seed_everything(seed, verbose=False)
    model = Noisy(optimizer)
    trainer = quiet_trainer(max_epochs=3, callbacks=list(callbacks), enable_checkpointing=bool(callbacks),
                            val_check_interval=0.5, num_sanity_val_steps=0)
    trainer.fit(model, *loaders(), ckpt_path=ckpt_path)
    return model


@pytest.fixture(scope="module", params=["sgd", "adamw"])
def uninterrupted(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(f"full-{request.param}")
    names = dict(save_top_k=-1, auto_insert_metric_name=False)
    every_step = ModelCheckpoint(dirpath=directory, every_n_train_steps=1, filename="step{step}", **names)
    every_epoch = ModelCheckpoint(dirpath=directory, every_n_epochs=1, filename="epoch{epoch}", **names)
    model = fit(0, optimizer=request.param, callbacks=[every_step, every_epoch])
    return request.param, directory, model


@pytest.mark.parametrize("name", [
    "epoch0.ckpt",     # saved at the first epoch's end
    "step10.ckpt",     # after the epoch's last batch, before its validation and end
    "step13.ckpt",     # inside the second epoch, before its mid-epoch validation
    "step15.ckpt",     # inside the second epoch, where validation follows the save
])
def test_resuming_from_any_checkpoint_ends_with_the_uninterrupted_weights(uninterrupted, name):
    optimizer, directory, full = uninterrupted
    resumed = fit(1234, os.path.join(directory, name), optimizer)
    assert all(torch.isfinite(value).all() for value in full.state_dict().values())
    for (key, expected), actual in zip(full.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(actual, expected), key  # bitwise: same order, same draws, same optimizer state
    step = int(name[4:-5]) if name.startswith("step") else 10
    assert resumed.seen == full.seen[step:]  # the batches after the checkpoint, in the same order


def test_each_epoch_has_its_own_order_decided_by_the_seed():
    sampler = ResumableSampler(10, shuffle=True, seed=3)
    first = list(sampler)
    assert sorted(first) == list(range(10)) and list(sampler) == first
    sampler.set_epoch(1)
    second = list(sampler)
    assert second != first and sorted(second) == list(range(10))
    sampler.skip(4)
    assert list(sampler) == second[4:] and list(sampler) == second  # a skip lasts one pass
    assert list(ResumableSampler(5, shuffle=False, seed=3)) == [0, 1, 2, 3, 4]


def test_the_seed_comes_from_the_global_generator_so_seeding_decides_the_order():
    orders = []
    for seed in (5, 5, 6):
        model = fit(seed)
        orders.append(model.seen)
    assert orders[0] == orders[1] != orders[2]


def test_a_loader_with_its_own_sampler_is_left_alone():
    class Every2nd(torch.utils.data.Sampler):
        def __iter__(self):
            return iter(range(0, 40, 2))

        def __len__(self):
            return 20

    train, val = loaders()
    custom = DataLoader(train.dataset, batch_size=4, sampler=Every2nd())
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(Noisy(), custom)
    assert trainer.train_dataloader is custom


def test_the_run_seed_is_drawn_only_for_a_loader_shuffled_by_the_global_generator():
    asked = []

    def run_seed():
        asked.append(1)
        return 11, True

    dataset = loaders()[0].dataset
    ordered = with_resumable_sampler(DataLoader(dataset, batch_size=4), run_seed)
    own = with_resumable_sampler(DataLoader(dataset, batch_size=4, shuffle=True,
                                            generator=torch.Generator().manual_seed(2)), run_seed)
    assert asked == [] and isinstance(ordered.sampler, ResumableSampler) and not ordered.sampler.shuffle
    assert own.sampler.shuffle and own.sampler.seed != 11
    shuffled = with_resumable_sampler(DataLoader(dataset, batch_size=4, shuffle=True), run_seed)
    assert asked == [1] and shuffled.sampler.seed == 11


class Positions(Noisy):
    """Records, per training batch, the epoch it ran in and which samples it held."""

    def __init__(self):
        super().__init__()
        self.batches: list[tuple[int, int]] = []
        self.samples: list[int] = []

    def training_step(self, batch, batch_idx):
        self.batches.append((self.current_epoch, batch_idx))
        self.samples += batch[0][:, 0].tolist()
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("saved_by", ["save_checkpoint after fit", "ModelCheckpoint at the epoch's end"])
def test_a_run_stopped_by_max_steps_and_extended_trains_the_rest_of_the_cut_epoch_first(tmp_path, saved_by):
    framework.seed_everything(0, verbose=False)
    first = Positions()
    callbacks = [ModelCheckpoint(dirpath=tmp_path, filename="cut")] if saved_by.startswith("Model") else []
    trainer = quiet_trainer(max_steps=4, callbacks=callbacks, enable_checkpointing=bool(callbacks))
    trainer.fit(first, loaders()[0])
    assert trainer.current_epoch == 1  # the cut epoch counts as run, as in Lightning
    path = tmp_path / "cut.ckpt"
    if not callbacks:
        trainer.save_checkpoint(path)

    framework.seed_everything(99, verbose=False)
    extended = Positions()
    trainer = quiet_trainer(max_steps=4 + 6 + 3)
    trainer.fit(extended, loaders()[0], ckpt_path=path)
    # Lightning's numbering: saved after fit, the counter had moved on, so the rest of the cut epoch runs as epoch 1;
    # saved in the cut epoch's end hooks, the run resumes inside epoch 0 (checked against Lightning 2.6.6)
    cut = 1 if saved_by.startswith("save_checkpoint") else 0
    assert extended.batches == [(cut, i) for i in range(4, 10)] + [(cut + 1, i) for i in range(3)]
    # and it is the rest of the cut epoch's own order: with the first run, every sample exactly once
    x = loaders()[0].dataset.tensors[0][:, 0].tolist()
    assert sorted(first.samples + extended.samples[:24]) == sorted(x)


def test_each_rank_resumes_from_its_own_saved_random_state():
    saved = [{"torch": torch.tensor([0])}, {"torch": torch.tensor([1])}]
    assert rng_state_of_rank(saved, 1) is saved[1] and rng_state_of_rank(saved, 0) is saved[0]
    assert rng_state_of_rank(saved[:1], 3) is saved[0]  # saved by fewer ranks: rank 0's state
    assert rng_state_of_rank(None, 0) is None and rng_state_of_rank([], 0) is None


def test_fit_again_on_an_interrupted_trainer_goes_on_from_the_batch_it_stopped_at():
    class InterruptedOnce(Positions):
        interrupted = False

        def training_step(self, batch, batch_idx):
            if batch_idx == 3 and not self.interrupted:
                self.interrupted = True
                raise KeyboardInterrupt
            return super().training_step(batch, batch_idx)

    framework.seed_everything(0, verbose=False)
    model, trainer = InterruptedOnce(), quiet_trainer(max_epochs=1)
    with pytest.warns(UserWarning, match="KeyboardInterrupt"), pytest.raises(KeyboardInterrupt):
        trainer.fit(model, loaders()[0])
    assert trainer.interrupted and model.batches == [(0, 0), (0, 1), (0, 2)]
    trainer.fit(model, loaders()[0])
    assert model.batches == [(0, i) for i in range(10)] and trainer.global_step == 10
    assert sorted(model.samples) == sorted(loaders()[0].dataset.tensors[0][:, 0].tolist())


class DropsOut(framework.Module):
    """Keeps the global random state its first training step starts from (which decides its dropout masks)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1))
        self.epoch_states: list[torch.Tensor] = []  # at the first step of each epoch

    def training_step(self, batch, batch_idx):
        if batch_idx == 0:
            self.epoch_states.append(torch.get_rng_state())
        return self.loss(batch)

    def loss(self, batch):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _dataset() -> TensorDataset:
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(1))
    return TensorDataset(x, x.sum(1, keepdim=True))


@pytest.mark.parametrize("shuffle", [False, True])
def test_the_first_step_sees_the_random_state_of_a_plain_loop(shuffle):
    """The Trainer draws from the global generator before the first step exactly what the plain loop's
    DataLoader draws (its workers' base seed, and a RandomSampler's seed), so dropout masks agree."""
    torch.manual_seed(0)
    model = DropsOut()
    quiet_trainer(max_epochs=3).fit(model, DataLoader(_dataset(), batch_size=8, shuffle=shuffle))

    torch.manual_seed(0)
    plain = DropsOut()
    optimizer = plain.configure_optimizers()
    for _ in range(3):
        for batch_idx, batch in enumerate(DataLoader(_dataset(), batch_size=8, shuffle=shuffle)):
            plain.training_step(batch, batch_idx).backward()
            optimizer.step()
            optimizer.zero_grad()
    assert len(model.epoch_states) == 3
    for epoch, (ours, theirs) in enumerate(zip(model.epoch_states, plain.epoch_states, strict=True)):
        assert torch.equal(ours, theirs), f"epoch {epoch}"


class LogsEveryStepAndEpoch(Regressor):
    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("loss", loss, on_step=True, on_epoch=True)
        return loss


class FailsInTheSecondEpoch(framework.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.current_epoch == 1 and batch_idx == 1:
            raise RuntimeError("interrupted")


def _fit_logging(root, fails: bool = False, ckpt_path: str | None = None) -> str:
    framework.seed_everything(0, verbose=False)
    callbacks = [ModelCheckpoint(dirpath=os.path.join(root, "checkpoints"), save_last=True)]  # saves at epoch ends
    trainer = quiet_trainer(max_epochs=3, logger=framework.loggers.CSVLogger(root, version=0), log_every_n_steps=1,
                            enable_checkpointing=True,
                            callbacks=callbacks + ([FailsInTheSecondEpoch()] if fails else []))
    try:
        trainer.fit(LogsEveryStepAndEpoch(), loaders()[0], ckpt_path=ckpt_path)
    except RuntimeError:
        assert fails
    with open(os.path.join(root, "lightning_logs", "version_0", "metrics.csv")) as rows:
        return rows.read()


def test_a_run_resumed_from_an_epoch_end_checkpoint_writes_that_epochs_row(tmp_path):
    # Without validation, ModelCheckpoint saves in on_train_epoch_end: before the epoch's row goes to the loggers,
    # while the checkpoint says the epoch is finished (a run resumed from it goes on with the next epoch).
    uninterrupted = _fit_logging(tmp_path / "whole")
    _fit_logging(tmp_path / "cut", fails=True)
    resumed = _fit_logging(tmp_path / "cut", ckpt_path=str(tmp_path / "cut" / "checkpoints" / "last.ckpt"))
    assert resumed == uninterrupted
    assert uninterrupted.count("\n0,") > 1 and len(uninterrupted.splitlines()) == 1 + 3 * (10 + 1)
