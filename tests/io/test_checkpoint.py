"""The checkpoint file (atomic, fsspec, weights-only) and the Trainer's checkpoints: contents, resume, test."""

from __future__ import annotations

import os
import pickle
import uuid

import fsspec
import pytest
import torch
from torch import nn

import framework
from framework import CheckpointError, MisconfigurationError
from framework.io.checkpoint_storage import load_checkpoint, save_checkpoint
from framework.io.fs import write_bytes_atomic
from tests.helpers import Regressor, loader, quiet_trainer, regression_data


@pytest.fixture(params=["local", "file-url", "memory"])
def root(request, tmp_path, memory_root):
    if request.param == "local":
        return str(tmp_path)
    if request.param == "file-url":
        return f"file://{tmp_path}"
    return memory_root


def _listing(directory: str) -> list[str]:
    fs, inner = fsspec.core.url_to_fs(directory)
    return sorted(os.path.basename(p.rstrip("/")) for p in fs.ls(inner, detail=False))


def _state(seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return {
        "weights": {"w": torch.randn(3, 2, generator=generator), "b": torch.zeros(2, dtype=torch.float64)},
        "step": seed,
        "name": f"run-{seed}",
        "history": [1.5, 2.5],
        "nothing": None,
    }


def _assert_state_equal(actual: dict, expected: dict) -> None:
    assert set(actual) == set(expected)
    torch.testing.assert_close(actual["weights"], expected["weights"])
    assert actual["weights"]["b"].dtype == torch.float64
    assert {k: actual[k] for k in ("step", "name", "history", "nothing")} == \
        {k: expected[k] for k in ("step", "name", "history", "nothing")}


# -- the file -------------------------------------------------------------------------------------------------------

def test_save_and_load_roundtrip(root):
    path = f"{root}/sub/dir/model.ckpt"  # parent folders are created
    save_checkpoint(_state(1), path)
    _assert_state_equal(load_checkpoint(path), _state(1))


def test_load_with_map_location(tmp_path):
    path = tmp_path / "m.ckpt"
    save_checkpoint(_state(1), path)
    loaded = load_checkpoint(path, map_location="meta")
    assert loaded["weights"]["w"].device.type == "meta"


def test_overwrite_leaves_no_temporary_files(root):
    path = f"{root}/model.ckpt"
    save_checkpoint(_state(1), path)
    save_checkpoint(_state(2), path)
    _assert_state_equal(load_checkpoint(path), _state(2))
    assert _listing(root) == ["model.ckpt"]


def test_unpicklable_value_leaves_the_old_file_intact(root):
    path = f"{root}/model.ckpt"
    save_checkpoint(_state(1), path)
    bad = {**_state(2), "callback": lambda: None}
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        save_checkpoint(bad, path)
    _assert_state_equal(load_checkpoint(path), _state(1))
    assert _listing(root) == ["model.ckpt"]


def test_failed_write_leaves_the_old_file_intact_and_no_temporary(root):
    path = f"{root}/model.ckpt"
    save_checkpoint(_state(1), path)
    with pytest.raises(TypeError):
        write_bytes_atomic(path, "text is not bytes")  # the handle's write() raises mid-write
    _assert_state_equal(load_checkpoint(path), _state(1))
    assert _listing(root) == ["model.ckpt"]


def test_missing_path_raises_file_not_found_naming_it(root):
    path = f"{root}/does-not-exist.ckpt"
    with pytest.raises(FileNotFoundError, match="does-not-exist.ckpt"):
        load_checkpoint(path)


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage"])
def test_a_damaged_file_is_refused_naming_it(root, damage):
    path = f"{root}/damaged.ckpt"
    save_checkpoint(_state(0), path)
    data = fsspec.open(path, "rb").open().read()
    damaged = {"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"not a checkpoint" * 8}[damage]
    with fsspec.open(path, "wb") as handle:
        handle.write(damaged)
    with pytest.raises(CheckpointError, match=r"damaged.ckpt' \(\d+ bytes\) is truncated or corrupted"):
        load_checkpoint(path)


@pytest.mark.parametrize("kept", [0.2, 0.5, 0.9, 0.99])
def test_a_larger_checkpoint_cut_anywhere_is_refused_naming_it(root, kept):
    # cut past the first few KB, torch.load's zip reader seeks beyond the end, and a local file raises OSError
    path = f"{root}/cut.ckpt"
    save_checkpoint({"weights": torch.randn(80, 80), "step": 3}, path)
    data = fsspec.open(path, "rb").open().read()
    with fsspec.open(path, "wb") as handle:
        handle.write(data[: int(len(data) * kept)])
    with pytest.raises(CheckpointError, match=r"cut.ckpt' \(\d+ bytes\) is truncated or corrupted"):
        load_checkpoint(path)


def test_a_checkpoint_of_a_newer_format_says_so(root):
    path = f"{root}/future.ckpt"
    save_checkpoint({"format_version": 2, "framework_version": "9.0.0", "state_dict": {}}, path)
    with pytest.raises(CheckpointError, match=r"future.ckpt' is in checkpoint format 2, written by framework 9.0.0; "
                                              r"framework .* reads format 1 and older. Upgrade"):
        load_checkpoint(path)


def test_fit_from_a_damaged_checkpoint_fails_before_training(tmp_path):
    path = tmp_path / "cut.ckpt"
    path.write_bytes(b"\x50\x4b\x03\x04 cut short")
    model = Regressor()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match="cut.ckpt"):
        quiet_trainer(max_epochs=1).fit(model, loader(), ckpt_path=path)
    _assert_weights(model.state_dict(), before)  # never a half-loaded model


CALLS: list[str] = []


def _side_effect() -> str:
    CALLS.append("unpickled code ran")
    return "ran"


class Arbitrary:
    """Unpickling it calls a function: exactly what weights_only must refuse."""

    def __reduce__(self):
        return (_side_effect, ())


class Plain:
    def __init__(self) -> None:
        self.value = 3


@pytest.mark.parametrize("obj", [Arbitrary(), Plain()], ids=["reduce-callable", "class-instance"])
def test_arbitrary_python_object_is_refused(tmp_path, obj):
    CALLS.clear()
    path = tmp_path / "unsafe.ckpt"
    torch.save({"state_dict": {}, "obj": obj}, path)
    with pytest.raises(pickle.UnpicklingError, match=r"unsafe\.ckpt' holds pickled Python objects.*can run any "
                                                     r"code.*weights_only=False"):
        load_checkpoint(path)
    assert CALLS == []
    # the same file does load when one opts in: the refusal came from weights_only
    assert "obj" in load_checkpoint(path, weights_only=False)


# -- the Trainer's checkpoint ---------------------------------------------------------------------------------------

EXPECTED_KEYS = {
    "framework_version", "format_version", "epoch", "global_step", "loops", "state_dict", "optimizer_states",
    "lr_schedulers",
    "precision", "callbacks", "hyper_parameters", "hparams_name",
}


class MomentumRegressor(Regressor):
    """SGD with momentum and an epoch StepLR, so a resume that forgets either state gives different weights."""

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]


class SaveAt(framework.Callback):
    """Saves a checkpoint at the end of ``epoch`` (or after batch ``batch`` of it)."""

    def __init__(self, path: str, epoch: int = 0, batch: int | None = None) -> None:
        self.path, self.epoch, self.batch = path, epoch, batch
        self.saved_weights: dict | None = None

    def _save(self, trainer, module):
        trainer.save_checkpoint(self.path)
        self.saved_weights = {k: v.clone() for k, v in module.state_dict().items()}

    def on_train_epoch_end(self, trainer, module):
        if self.batch is None and trainer.current_epoch == self.epoch:
            self._save(trainer, module)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self.batch is not None and trainer.current_epoch == self.epoch and batch_idx == self.batch:
            self._save(trainer, module)


def _plain_momentum_run(epochs: int, n: int = 64, batch_size: int = 8) -> dict:
    model = MomentumRegressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=model.hparams.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for _ in range(epochs):
        for x, y in loader(n, batch_size):
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
        scheduler.step()
    return model.state_dict()


def _assert_weights(actual: dict, expected: dict) -> None:
    assert set(actual) == set(expected)
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], msg=lambda m, name=name: f"{name}: {m}")


@pytest.fixture(scope="module")
def fitted():
    model = Regressor(lr=0.1)
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(model, loader())
    return model, trainer


def test_trainer_checkpoint_keys_and_values(fitted, tmp_path):
    model, trainer = fitted
    path = tmp_path / "full.ckpt"
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, weights_only=True)  # plain torch, safe mode
    assert set(checkpoint) == EXPECTED_KEYS
    assert checkpoint["framework_version"] == framework.__version__ and checkpoint["format_version"] == 1
    assert checkpoint["global_step"] == trainer.global_step == 16
    assert checkpoint["epoch"] == trainer.current_epoch
    assert checkpoint["hyper_parameters"] == {"lr": 0.1, "features": 4}
    assert len(checkpoint["optimizer_states"]) == 1
    assert checkpoint["optimizer_states"][0]["param_groups"][0]["lr"] == 0.1
    assert checkpoint["lr_schedulers"] == []
    assert checkpoint["callbacks"] == {}
    assert isinstance(checkpoint["loops"], dict) and checkpoint["loops"]
    _assert_weights(checkpoint["state_dict"], model.state_dict())


def test_trainer_checkpoint_weights_only_omits_optimizer_states(fitted, tmp_path):
    model, trainer = fitted
    path = tmp_path / "weights.ckpt"
    trainer.save_checkpoint(path, weights_only=True)
    checkpoint = load_checkpoint(path)
    assert "optimizer_states" not in checkpoint
    assert "lr_schedulers" not in checkpoint
    assert {"state_dict", "epoch", "global_step", "hyper_parameters"} <= set(checkpoint)
    _assert_weights(checkpoint["state_dict"], model.state_dict())


def test_fit_and_load_from_checkpoint_refuse_a_crafted_checkpoint_unless_told_to_trust_it(fitted, tmp_path):
    model, trainer = fitted
    path = tmp_path / "crafted.ckpt"
    trainer.save_checkpoint(path)
    torch.save({**torch.load(path, weights_only=True), "payload": Arbitrary()}, path)
    CALLS.clear()
    with pytest.raises(pickle.UnpicklingError, match="can run any code"):
        quiet_trainer(max_epochs=3).fit(Regressor(lr=0.1), loader(), ckpt_path=path)
    with pytest.raises(pickle.UnpicklingError, match="can run any code"):
        Regressor.load_from_checkpoint(path)
    with pytest.raises(pickle.UnpicklingError, match="can run any code"):
        quiet_trainer().test(Regressor(lr=0.1), loader(), ckpt_path=path, verbose=False)
    assert CALLS == []
    resumed = quiet_trainer(max_epochs=3)
    resumed.fit(Regressor(lr=0.1), loader(), ckpt_path=path, weights_only=False)  # the explicit opt-in
    assert CALLS == ["unpickled code ran"] and resumed.global_step == 24


def test_trainer_checkpoint_to_memory_filesystem(fitted, memory_root):
    model, trainer = fitted
    path = f"{memory_root}/run/last.ckpt"
    trainer.save_checkpoint(path)
    checkpoint = load_checkpoint(path)
    assert set(checkpoint) == EXPECTED_KEYS
    _assert_weights(checkpoint["state_dict"], model.state_dict())
    assert _listing(f"{memory_root}/run") == ["last.ckpt"]


def test_uninterrupted_run_equals_plain_pytorch():
    model = MomentumRegressor()
    quiet_trainer(max_epochs=2).fit(model, loader())
    _assert_weights(model.state_dict(), _plain_momentum_run(epochs=2))


def test_resume_after_an_epoch_equals_uninterrupted_run(tmp_path):
    path = str(tmp_path / "epoch0.ckpt")
    saver = SaveAt(path, epoch=0)
    full_model = MomentumRegressor()
    full_trainer = quiet_trainer(max_epochs=2, callbacks=[saver])
    full_trainer.fit(full_model, loader())
    assert saver.saved_weights is not None
    _assert_weights(load_checkpoint(path)["state_dict"], saver.saved_weights)
    _assert_weights(saver.saved_weights, _plain_momentum_run(epochs=1))

    resumed_model = MomentumRegressor(lr=0.05)
    with torch.no_grad():
        resumed_model.net.weight.fill_(3.0)  # must be overwritten by the checkpoint
    resumed_trainer = quiet_trainer(max_epochs=2)
    resumed_trainer.fit(resumed_model, loader(), ckpt_path=path)

    assert resumed_trainer.global_step == full_trainer.global_step == 16
    assert resumed_trainer.current_epoch == full_trainer.current_epoch
    _assert_weights(resumed_model.state_dict(), full_model.state_dict())
    assert resumed_trainer.lr_scheduler_configs[0].scheduler.get_last_lr() == \
        full_trainer.lr_scheduler_configs[0].scheduler.get_last_lr()


def test_resume_inside_an_epoch_equals_uninterrupted_run(tmp_path):
    path = str(tmp_path / "mid.ckpt")
    full_model = MomentumRegressor()
    full_trainer = quiet_trainer(max_epochs=2, callbacks=[SaveAt(path, epoch=0, batch=3)])
    full_trainer.fit(full_model, loader())
    assert load_checkpoint(path)["global_step"] == 4

    resumed_model = MomentumRegressor()
    resumed_trainer = quiet_trainer(max_epochs=2)
    resumed_trainer.fit(resumed_model, loader(), ckpt_path=path)
    assert resumed_trainer.global_step == 16
    _assert_weights(resumed_model.state_dict(), full_model.state_dict())


def test_resume_from_weights_only_checkpoint_raises(fitted, tmp_path):
    _, trainer = fitted
    path = tmp_path / "weights.ckpt"
    trainer.save_checkpoint(path, weights_only=True)
    with pytest.raises(MisconfigurationError, match="weights only"):
        quiet_trainer(max_epochs=3).fit(Regressor(lr=0.1), loader(), ckpt_path=path)


def test_resume_from_missing_path_names_it(tmp_path):
    path = tmp_path / "nowhere.ckpt"
    with pytest.raises(FileNotFoundError, match="nowhere.ckpt"):
        quiet_trainer(max_epochs=1).fit(Regressor(), loader(), ckpt_path=path)


def test_test_with_ckpt_path_loads_weights_first(fitted, tmp_path):
    trained, trainer = fitted
    path = tmp_path / "trained.ckpt"
    trainer.save_checkpoint(path)

    fresh = Regressor(lr=0.1)
    with torch.no_grad():
        fresh.net.weight.zero_()
        fresh.net.bias.fill_(10.0)
    results = quiet_trainer().test(fresh, loader(), ckpt_path=str(path), verbose=False)

    x, y = regression_data().tensors
    with torch.no_grad():
        expected = nn.functional.mse_loss(trained(x), y)
    assert len(results) == 1
    torch.testing.assert_close(torch.tensor(results[0]["test_loss"]), expected)
    _assert_weights(fresh.state_dict(), trained.state_dict())


def test_storage_options_reach_the_filesystem(fitted):
    from fsspec.implementations.memory import MemoryFileSystem

    class CredentialedFS(MemoryFileSystem):
        """A memory filesystem that notes the options it was made with (as s3fs would take credentials)."""

        protocol = "credentialed"
        made_with: list[dict] = []

        def __init__(self, **options):
            CredentialedFS.made_with.append(options)
            super().__init__()

    fsspec.register_implementation("credentialed", CredentialedFS, clobber=True)
    model, trainer = fitted
    path = f"credentialed://ckpt-{uuid.uuid4().hex}/last.ckpt"
    trainer.save_checkpoint(path, storage_options={"token": "secret"})
    assert {"token": "secret"} in CredentialedFS.made_with
    _assert_weights(load_checkpoint(path)["state_dict"], model.state_dict())
