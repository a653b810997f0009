"""DataModule: its hooks around every stage, its loaders, its batch-transfer hooks and its checkpoint state."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import framework
from framework.io.checkpoint_storage import load_checkpoint
from tests.helpers import Regressor, loader, quiet_trainer, regression_data

# Both recording classes override the batch-transfer hooks; the one test about that checks the warning.
pytestmark = pytest.mark.filterwarnings("ignore:.*overridden in both the Module and the DataModule")

SEEDS = {"train": 0, "val": 1, "test": 2, "predict": 3}
SIZES = {"train": 32, "val": 16, "test": 24, "predict": 8}


def _data(stage: str):
    return regression_data(SIZES[stage], seed=SEEDS[stage])


class RecordingDataModule(framework.DataModule):
    def __init__(self, events: list | None = None, transform: bool = False) -> None:
        super().__init__()
        self.events = events if events is not None else []
        self.transform = transform
        self.prepare_calls = 0
        self.counter = 0
        self.loaded: list[dict] = []
        self.datasets: dict = {}

    def prepare_data(self):
        self.prepare_calls += 1
        self.events.append("dm.prepare_data")

    def setup(self, stage):
        self.events.append(f"dm.setup:{stage.value}")  # a TrainerFn, as in Lightning
        self.datasets = {name: _data(name) for name in SEEDS}

    def teardown(self, stage):
        self.events.append(f"dm.teardown:{stage.value}")

    def train_dataloader(self):
        self.events.append("dm.train_dataloader")
        return DataLoader(self.datasets["train"], batch_size=8)

    def val_dataloader(self):
        self.events.append("dm.val_dataloader")
        return DataLoader(self.datasets["val"], batch_size=8)

    def test_dataloader(self):
        self.events.append("dm.test_dataloader")
        return DataLoader(self.datasets["test"], batch_size=8)

    def predict_dataloader(self):
        self.events.append("dm.predict_dataloader")
        return DataLoader(self.datasets["predict"].tensors[0], batch_size=4)

    def on_before_batch_transfer(self, batch, dataloader_idx):
        self.events.append("dm.before")
        self.counter += 1
        if self.transform:
            x, y = batch
            return [x * 2, y]
        return batch

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self.events.append("dm.after")
        if self.transform:
            x, y = batch
            return [x * 3, y]
        return batch

    def state_dict(self):
        return {"counter": self.counter, "name": "recording"}

    def load_state_dict(self, state_dict):
        self.events.append("dm.load_state_dict")
        self.loaded.append(dict(state_dict))
        self.counter = state_dict["counter"]


class RecordingModule(Regressor):
    def __init__(self, events: list | None = None, transform: bool = False) -> None:
        super().__init__(lr=0.05)
        self.events = events if events is not None else []
        self.transform = transform
        self.inputs: list[torch.Tensor] = []

    def setup(self, stage):
        self.events.append(f"module.setup:{stage.value}")

    def teardown(self, stage):
        self.events.append(f"module.teardown:{stage.value}")

    def prepare_data(self):
        self.events.append("module.prepare_data")

    def on_before_batch_transfer(self, batch, dataloader_idx):
        self.events.append("module.before")
        if self.transform:
            x, y = batch
            return [x + 1, y]
        return batch

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self.events.append("module.after")
        if self.transform:
            x, y = batch
            return [x - 5, y]
        return batch

    def training_step(self, batch, batch_idx):
        self.events.append("module.training_step")
        self.inputs.append(batch[0])
        return super().training_step(batch, batch_idx)


def _plain_fit(epochs: int) -> dict:
    model = Regressor(lr=0.05)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(epochs):
        for x, y in DataLoader(_data("train"), batch_size=8):
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
    return model.state_dict()


def _assert_weights(actual: dict, expected: dict) -> None:
    assert set(actual) == set(expected)
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], msg=lambda m, name=name: f"{name}: {m}")


def _mse(model: nn.Module, stage: str) -> torch.Tensor:
    x, y = _data(stage).tensors
    with torch.no_grad():
        return nn.functional.mse_loss(model(x), y)


# -- the stages -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("positional", [False, True], ids=["datamodule=", "positional"])
def test_fit_takes_loaders_and_hooks_from_the_datamodule(positional):
    events: list = []
    dm = RecordingDataModule(events)
    model = RecordingModule(events)
    trainer = quiet_trainer(max_epochs=2)
    if positional:
        trainer.fit(model, dm)
    else:
        trainer.fit(model, datamodule=dm)

    assert trainer.datamodule is dm
    assert dm.trainer is trainer
    assert dm.prepare_calls == 1
    assert events.count("dm.setup:fit") == 1 and events.count("dm.teardown:fit") == 1
    assert events.count("module.prepare_data") == 1
    assert events.index("dm.prepare_data") < events.index("module.prepare_data") < events.index("dm.setup:fit")
    assert events.index("dm.setup:fit") < events.index("module.setup:fit")
    assert events.index("module.setup:fit") < events.index("module.training_step")
    assert events.index("dm.teardown:fit") < events.index("module.teardown:fit") == len(events) - 1
    assert "dm.train_dataloader" in events and "dm.val_dataloader" in events
    assert not any(stage in e for e in events for stage in ("validate", "test", "predict") if "setup" in e)
    assert trainer.global_step == 2 * 4  # 32 samples / 8 per batch, two epochs
    _assert_weights(model.state_dict(), _plain_fit(epochs=2))
    torch.testing.assert_close(trainer.callback_metrics["val_loss"], _mse(model, "val"))


@pytest.mark.parametrize("positional", [False, True], ids=["datamodule=", "positional"])
def test_validate_test_predict_with_a_datamodule(positional):
    model = Regressor(lr=0.05)
    with torch.no_grad():
        model.net.weight.copy_(torch.tensor([[1.0, 2.0, 2.5, 4.0]]))

    results = {}
    for stage in ("validate", "test", "predict"):
        events: list = []
        dm = RecordingDataModule(events)
        trainer = quiet_trainer()
        method = getattr(trainer, stage)
        kwargs = {} if stage == "predict" else {"verbose": False}
        results[stage] = method(model, dm, **kwargs) if positional else method(model, datamodule=dm, **kwargs)
        assert dm.prepare_calls == 1, stage
        assert events.count(f"dm.setup:{stage}") == 1, events
        assert events.count(f"dm.teardown:{stage}") == 1, events
        assert not any(e.startswith("dm.setup:") and e != f"dm.setup:{stage}" for e in events)
        loader_call = {"validate": "dm.val_dataloader", "test": "dm.test_dataloader",
                       "predict": "dm.predict_dataloader"}[stage]
        assert loader_call in events
        assert "dm.train_dataloader" not in events

    torch.testing.assert_close(torch.tensor(results["validate"][0]["val_loss"]), _mse(model, "val"))
    torch.testing.assert_close(torch.tensor(results["test"][0]["test_loss"]), _mse(model, "test"))
    predictions = torch.cat(results["predict"])
    with torch.no_grad():
        torch.testing.assert_close(predictions, model(_data("predict").tensors[0]))


# -- batch-transfer hooks ------------------------------------------------------------------------------------------

def test_datamodule_batch_transfer_hooks_replace_the_modules_with_a_warning():
    """As in Lightning: a hook the DataModule overrides is used instead of the Module's."""
    events: list = []
    dm = RecordingDataModule(events, transform=True)
    model = RecordingModule(events, transform=True)
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=0, limit_val_batches=0)
    with pytest.warns(UserWarning, match="on_before_batch_transfer.*both"):
        trainer.fit(model, datamodule=dm)

    transfer_events = [e for e in events if e.endswith(("before", "after", "training_step"))]
    assert transfer_events == ["dm.before", "dm.after", "module.training_step"] * 4
    # dm_after(dm_before(x)) = 3 * 2x
    expected_inputs = [6 * x for x, _ in DataLoader(_data("train"), batch_size=8)]
    assert len(model.inputs) == len(expected_inputs)
    for seen, expected in zip(model.inputs, expected_inputs):
        torch.testing.assert_close(seen, expected)


def test_a_datamodule_whose_batch_hooks_only_wrap_the_base_ones_leaves_the_modules_in_use():
    """As Lightning decides: a wrapper of the base method (functools.wraps, partial) is no hook of the DataModule's
    own, so the Module's batch hooks run (the way Lightning's hook tests record calls)."""
    import functools

    class Wrapping(framework.DataModule):
        def __init__(self) -> None:
            super().__init__()
            self.called: list[str] = []
            for name in ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer"):
                method = getattr(self, name)
                recording = functools.partial(self._record, name, method)
                functools.update_wrapper(recording, method)
                setattr(self, name, recording)

        def _record(self, name, method, *args, **kwargs):
            self.called.append(name)
            return method(*args, **kwargs)

        def train_dataloader(self):
            return DataLoader(_data("train"), batch_size=8)

    events: list = []
    dm, model = Wrapping(), RecordingModule(events, transform=True)
    quiet_trainer(max_epochs=1, num_sanity_val_steps=0, limit_val_batches=0).fit(model, datamodule=dm)
    assert dm.called == []
    assert [e for e in events if e.endswith(("before", "after"))] == ["module.before", "module.after"] * 4


# -- checkpoint state ------------------------------------------------------------------------------------------------

class SaveAfterFirstEpoch(framework.Callback):
    def __init__(self, path) -> None:
        self.path = path

    def on_train_epoch_end(self, trainer, module):
        if trainer.current_epoch == 0:
            trainer.save_checkpoint(self.path)


def test_datamodule_state_in_checkpoint_and_restored_on_resume(tmp_path):
    path = tmp_path / "epoch0.ckpt"
    dm = RecordingDataModule()
    model = RecordingModule()
    full = quiet_trainer(max_epochs=2, num_sanity_val_steps=0, callbacks=[SaveAfterFirstEpoch(path)])
    full.fit(model, datamodule=dm)

    saved = load_checkpoint(path)
    # after one epoch: 4 training batches and 2 validation batches went through the hook
    assert saved["datamodule"] == {"counter": 6, "name": "recording"}
    final_path = tmp_path / "final.ckpt"
    full.save_checkpoint(final_path)
    assert load_checkpoint(final_path)["datamodule"] == dm.state_dict() == {"counter": 12, "name": "recording"}

    events: list = []
    dm2 = RecordingDataModule(events)
    model2 = RecordingModule(events)
    resumed = quiet_trainer(max_epochs=2, num_sanity_val_steps=0)
    resumed.fit(model2, datamodule=dm2, ckpt_path=path)
    assert dm2.loaded == [{"counter": 6, "name": "recording"}]
    assert events.index("dm.load_state_dict") < events.index("dm.before")
    assert dm2.counter == 12  # continued from the restored state
    _assert_weights(model2.state_dict(), model.state_dict())
    assert resumed.global_step == full.global_step == 8


def test_no_datamodule_no_datamodule_key(tmp_path):
    model = Regressor()
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(model, DataLoader(_data("train"), batch_size=8))
    trainer.save_checkpoint(tmp_path / "m.ckpt")
    assert "datamodule" not in load_checkpoint(tmp_path / "m.ckpt")


def test_datamodule_save_hyperparameters():
    class Configured(framework.DataModule):
        def __init__(self, batch_size: int = 8, root: str = "/data") -> None:
            super().__init__()
            self.save_hyperparameters()

    assert Configured(batch_size=16).hparams == {"batch_size": 16, "root": "/data"}
    assert Configured().hparams.root == "/data"


def test_from_datasets_wraps_each_stage_in_a_loader():
    train, val = regression_data(n=32), [regression_data(n=16), regression_data(n=8, seed=1)]
    datamodule = framework.DataModule.from_datasets(train, val, test_dataset=regression_data(n=8), batch_size=8)
    assert isinstance(datamodule.train_dataloader().sampler, torch.utils.data.RandomSampler)
    assert [len(v) for v in datamodule.val_dataloader()] == [2, 1]
    with pytest.raises(framework.MisconfigurationError, match="`predict_dataloader` must be implemented"):
        datamodule.predict_dataloader()  # no dataset given: Lightning's default, which says it is missing

    class TwoVal(Regressor):
        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val_loss", self.loss(batch))

    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(TwoVal(), datamodule=datamodule)
    assert trainer.num_training_batches == 4 and trainer.num_val_batches == [2, 1]
    assert list(trainer.test(TwoVal(), datamodule=datamodule, verbose=False)[0]) == ["test_loss"]


def test_datamodule_load_from_checkpoint_rebuilds_it_with_its_hyperparameters_and_state(tmp_path):
    class Sized(framework.DataModule):
        def __init__(self, batch_size: int = 4):
            super().__init__()
            self.save_hyperparameters()
            self.restored = None

        def train_dataloader(self):
            return DataLoader(regression_data(n=16), batch_size=self.hparams.batch_size)

        def state_dict(self):
            return {"seen": 7}

        def load_state_dict(self, state_dict):
            self.restored = state_dict

    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(Regressor(), datamodule=Sized(batch_size=8))
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    loaded = Sized.load_from_checkpoint(tmp_path / "a.ckpt")
    assert loaded.hparams.batch_size == 8 and loaded.restored == {"seen": 7}


def test_undefined_loader_methods_say_so_when_called_and_the_trainer_passes_over_them():
    class OnlyTraining(framework.DataModule):
        def train_dataloader(self):
            return loader()

    datamodule = OnlyTraining()
    for name in ("val_dataloader", "test_dataloader", "predict_dataloader"):
        with pytest.raises(framework.MisconfigurationError, match=f"`{name}` must be implemented"):
            getattr(datamodule, name)()
    with pytest.raises(framework.MisconfigurationError, match="`train_dataloader` must be implemented"):
        Regressor().train_dataloader()
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(Regressor(), datamodule=datamodule)  # no validation loader: validation is skipped, as in Lightning
    assert trainer.global_step == 8 and trainer.num_val_batches == []
