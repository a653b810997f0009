"""The smaller helpers libraries import from Lightning, each checked against what Lightning's does: the summary
object, files through fsspec, collections, hyperparameter files, memory errors, seeding, warnings, enums, the
accelerators, the CLI's helpers, the loggers' helpers and the demo model."""

from __future__ import annotations

import argparse
import os
import random
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, SequentialSampler

from framework.as_lightning.accelerators import CPUAccelerator, CUDAAccelerator, find_usable_cuda_devices
from framework.as_lightning.boring_classes import BoringDataModule, BoringModel, ManualOptimBoringModel
from framework.as_lightning.cli import instantiate_class
from framework.as_lightning.data import _update_dataloader, has_len, sized_len
from framework.as_lightning.enums import LightningEnum
from framework.as_lightning.logger_helpers import _add_prefix, _convert_params, _flatten_dict, _sanitize_params
from framework.as_lightning.migration import pl_legacy_patch
from framework.as_lightning.model_helpers import is_overridden
from framework.as_lightning.throughput import measure_flops
from framework.errors import MisconfigurationError, UnsafeCheckpointError
from framework.seed import isolate_rng, pl_worker_init_function, reset_seed, seed_everything
from framework.utilities.apply_func import convert_tensors_to_scalars, move_data_to_device
from framework.utilities.cloud_io import _atomic_save, _load, get_filesystem
from framework.utilities.memory import garbage_collection_cuda, is_oom_error, recursive_detach
from framework.utilities.model_summary import ModelSummary, get_human_readable_count, summarize
from framework.utilities.rank_zero import _get_rank
from framework.utilities.saving import load_hparams_from_yaml, save_hparams_to_yaml
from framework.utilities.types import _PATH
from framework.utilities.warnings import PossibleUserWarning, disable_possible_user_warnings
from tests.helpers import quiet_trainer


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 2)
        self.example_input_array = torch.zeros(3, 4)

    def forward(self, x):
        return self.head(self.encoder(x))


def test_the_summary_object_has_lightnings_attributes():
    summary = summarize(Small(), max_depth=1)
    assert isinstance(summary, ModelSummary) and summary.max_depth == 1
    assert summary.layer_names == ["encoder", "head"] and summary.layer_types == ["Sequential", "Linear"]
    assert summary.param_nums == [40, 18] and summary.total_parameters == summary.trainable_parameters == 58
    assert summary.in_sizes == [[3, 4], [3, 8]] and summary.out_sizes == [[3, 8], [3, 2]]
    assert summary.model_size == pytest.approx(58 * 4 / 1e6) and "Total params" in str(summary)
    assert get_human_readable_count(1234) == "1.2 K"


def test_files_through_fsspec_written_atomically_and_read_safely(tmp_path):
    path = tmp_path / "state.pt"
    _atomic_save({"weights": torch.ones(2)}, path)
    assert _load(path)["weights"].tolist() == [1.0, 1.0]
    assert get_filesystem(str(path)).exists(str(path))
    torch.save({"run": os.system}, tmp_path / "unsafe.pt")
    with pytest.raises(UnsafeCheckpointError, match="unsafe.pt"):
        _load(tmp_path / "unsafe.pt")
    assert _load(tmp_path / "unsafe.pt", weights_only=False)["run"] is os.system
    with open(path, "rb") as file:
        assert _load(file)["weights"].sum() == 2
    assert _PATH == str | Path  # Lightning's Union[str, Path]


def test_collections_and_batches():
    batch = {"x": torch.ones(2, requires_grad=True) * 2, "names": ["a"]}
    assert move_data_to_device(batch, "cpu")["names"] == ["a"]
    assert convert_tensors_to_scalars({"loss": torch.tensor(0.5)}) == {"loss": 0.5}
    detached = recursive_detach(batch)
    assert not detached["x"].requires_grad and detached["names"] == ["a"]


def test_hyperparameter_files_round_trip(tmp_path):
    path = tmp_path / "hparams.yaml"
    save_hparams_to_yaml(path, argparse.Namespace(lr=0.1, layers=[64, 64], activation=nn.ReLU))
    loaded = load_hparams_from_yaml(path)
    assert loaded["lr"] == 0.1 and loaded["layers"] == [64, 64] and "ReLU" in loaded["activation"]
    with pytest.warns(RuntimeWarning, match="Missing Tags"):
        assert load_hparams_from_yaml(tmp_path / "absent.yaml") == {}


def test_memory_errors_are_told_apart():
    assert is_oom_error(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom_error(torch.OutOfMemoryError("out of memory"))
    assert not is_oom_error(RuntimeError("shape mismatch"))
    garbage_collection_cuda()  # nothing to give back without CUDA, and no error


def test_seeding_helpers(monkeypatch):
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    reset_seed()  # no seed chosen yet: nothing happens
    seed_everything(3, verbose=False)
    first = torch.rand(1)
    reset_seed()
    assert torch.rand(1).item() == first.item()
    with isolate_rng():
        torch.rand(5)
        random.random()
    after = torch.rand(1)
    reset_seed()
    torch.rand(1)
    assert torch.rand(1).item() == after.item()
    pl_worker_init_function(0, rank=1)
    monkeypatch.setenv("RANK", "5")
    assert _get_rank() == 5


def test_possible_user_warnings_can_be_silenced():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        disable_possible_user_warnings()
        warnings.warn("few workers", PossibleUserWarning, stacklevel=1)
    assert not caught


def test_lightning_enum_compares_with_strings_in_any_case():
    class Mode(LightningEnum):
        FAST = "fast"

    assert Mode.FAST == "FAST" and Mode.from_str("fast") is Mode.FAST and Mode.from_str("Fast", "value") is Mode.FAST
    with pytest.raises(ValueError, match="accepted are \\['fast'\\]"):
        Mode.from_str("slow")


def test_accelerators_answer_lightnings_class_methods_and_choose_the_trainers_device():
    assert CPUAccelerator.is_available() and CUDAAccelerator.is_available() == torch.cuda.is_available()
    assert quiet_trainer(accelerator=CPUAccelerator()).runtime.device.type == "cpu"
    if not torch.cuda.is_available():
        assert find_usable_cuda_devices() == []
        with pytest.raises(MisconfigurationError, match="find_usable_cuda_devices\\(1\\): only 0"):
            find_usable_cuda_devices(1)


def test_the_cli_helpers_build_classes_from_their_paths():
    layer = instantiate_class((4, 2), {"class_path": "torch.nn.Linear", "init_args": {"bias": False}})
    assert isinstance(layer, nn.Linear) and layer.bias is None
    with pytest.raises(MisconfigurationError, match="class_path"):
        instantiate_class((), {"init_args": {}})


def test_data_helpers():
    loader = DataLoader(range(10), batch_size=2, shuffle=True)
    rebuilt = _update_dataloader(loader, SequentialSampler(range(10)))
    assert [batch.tolist() for batch in rebuilt][0] == [0, 1] and rebuilt.batch_size == 2
    assert has_len(loader) and sized_len(iter([1])) is None


def test_logger_helpers():
    assert _add_prefix({"loss": 1}, "train", "/") == {"train/loss": 1}
    assert _convert_params(argparse.Namespace(a=1)) == {"a": 1} and _convert_params(None) == {}
    assert _flatten_dict({"optim": {"lr": 0.1, "betas": {"b1": 0.9}}}) == {"optim/lr": 0.1, "optim/betas/b1": 0.9}
    assert _sanitize_params({"layers": [1, 2], "lr": 0.1}) == {"layers": "[1, 2]", "lr": 0.1}


def test_is_overridden_and_throughput():
    class Own(BoringModel):
        def training_step(self, batch, batch_idx):
            return super().training_step(batch, batch_idx)

    assert is_overridden("training_step", Own()) and is_overridden("validation_step", Own())  # BoringModel's own
    assert not is_overridden("on_train_start", Own()) and not is_overridden("training_step", BoringModel(), BoringModel)
    with pytest.raises(ValueError, match="give parent="):
        is_overridden("forward", object())
    model = nn.Linear(8, 4, bias=False)
    x = torch.zeros(2, 8)
    assert measure_flops(model, lambda: model(x)) == 2 * 2 * 8 * 4
    assert measure_flops(model, lambda: model(x), lambda y: y.sum()) == 3 * 2 * 2 * 8 * 4 - 2 * 2 * 8 * 4


def test_the_demo_classes_train_and_the_legacy_patch_is_a_plain_block(tmp_path):
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=4, limit_val_batches=2)
    trainer.fit(BoringModel(), datamodule=BoringDataModule())
    assert trainer.global_step == 4
    manual = ManualOptimBoringModel()
    quiet_trainer(max_steps=3).fit(manual)
    with pl_legacy_patch():
        assert _load(_save_state(tmp_path))["step"] == 1


def _save_state(tmp_path) -> str:
    path = str(tmp_path / "old.ckpt")
    torch.save({"step": 1}, path)
    return path
