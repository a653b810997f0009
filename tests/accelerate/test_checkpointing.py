"""save_state / load_state resume a loop exactly; the files are safe to load; save_model writes whole weights."""

from __future__ import annotations

import json
import os

import pytest
import torch

from framework.accelerate import Accelerator
from framework.accelerate.utils import ProjectConfiguration
from framework.errors import MisconfigurationError
from tests.accelerate.loops import model_and_optimizer
from tests.accelerate.resumable import train


@pytest.mark.parametrize(("resume", "masks"), [("position", False), ("skip", False), ("position", True)])
def test_a_resumed_loop_ends_as_the_uninterrupted_one(tmp_path, resume, masks):
    whole = train(str(tmp_path / "unused"), masks=masks)
    saved = train(str(tmp_path / "state"), stop=True, masks=masks)
    assert saved["saved"] == ["custom_checkpoint_0.pkl", "dl_state_dict.bin", "model.safetensors", "optimizer.bin",
                              "random_states_0.pkl", "scheduler.bin", "state_complete.json"]
    resumed = train(str(tmp_path / "state"), resume=resume, masks=masks)
    assert resumed["lr"] == whole["lr"]
    for name, value in whole["weights"].items():
        assert torch.equal(value, resumed["weights"][name]), name


def test_fp16_state_keeps_the_scaler_and_every_file_loads_without_unpickling_code(tmp_path):
    train(str(tmp_path), stop=True, mixed_precision="fp16")
    for name in os.listdir(tmp_path):
        if name.endswith((".bin", ".pkl", ".pt")):
            torch.load(tmp_path / name, weights_only=True)
    assert "scale" in torch.load(tmp_path / "scaler.pt", weights_only=True)


def test_automatic_naming_keeps_the_last_states_and_load_state_takes_the_newest(tmp_path):
    config = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(cpu=True, project_config=config)
    model, optimizer = accelerator.prepare(*model_and_optimizer())
    for _ in range(3):
        accelerator.save_state()
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["checkpoint_1", "checkpoint_2"]
    assert accelerator.save_iteration == 3
    later = Accelerator(cpu=True, project_config=ProjectConfiguration(project_dir=str(tmp_path),
                                                                        automatic_checkpoint_naming=True))
    later.prepare(*model_and_optimizer())
    later.load_state()
    assert later.save_iteration == 3
    with pytest.raises(MisconfigurationError, match="checkpoint_2 exists already"):
        later.project_configuration.iteration = 2
        later.save_state()


def test_a_failure_while_saving_leaves_the_previous_state_in_place(tmp_path):
    class Breaks:
        fail = False

        def state_dict(self):
            if self.fail:
                raise RuntimeError("disk full")
            return {"n": 1}

        def load_state_dict(self, state):
            pass

    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(*model_and_optimizer())
    breaks = Breaks()
    accelerator.register_for_checkpointing(breaks)
    accelerator.save_state(tmp_path / "state")
    before = sorted(os.listdir(tmp_path / "state"))
    breaks.fail = True
    with torch.no_grad():
        model.module[0].weight.add_(1.0)
    with pytest.raises(RuntimeError, match="disk full"):
        accelerator.save_state(tmp_path / "state")
    assert sorted(os.listdir(tmp_path / "state")) == before
    breaks.fail = False
    accelerator.load_state(tmp_path / "state")
    assert torch.equal(model.module[0].weight, model_and_optimizer()[0][0].weight)


def test_bad_input_is_named(tmp_path):
    accelerator = Accelerator(cpu=True)
    with pytest.raises(MisconfigurationError, match="save_state\\(\\) needs output_dir"):
        accelerator.save_state()
    with pytest.raises(FileNotFoundError, match="no such folder"):
        accelerator.load_state(tmp_path / "missing")
    with pytest.raises(TypeError, match="needs state_dict\\(\\) and load_state_dict\\(\\)"):
        accelerator.register_for_checkpointing(object())
    accelerator.prepare(*model_and_optimizer())
    accelerator.save_state(tmp_path / "state")
    accelerator.prepare(torch.optim.lr_scheduler.StepLR(accelerator._optimizers[0].optimizer, 1))
    with pytest.raises(MisconfigurationError, match="scheduler.bin is missing"):
        accelerator.load_state(tmp_path / "state")


def test_save_model_writes_whole_weights_as_safetensors_bin_or_shards(tmp_path):
    from safetensors.torch import load_file

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(model_and_optimizer()[0])
    expected = model.module.state_dict()
    accelerator.save_model(model, tmp_path / "safe")
    assert os.listdir(tmp_path / "safe") == ["model.safetensors"]
    assert all(torch.equal(value, expected[name]) for name, value in load_file(tmp_path / "safe" /
                                                                                 "model.safetensors").items())
    accelerator.save_model(model, tmp_path / "bin", safe_serialization=False)
    loaded = torch.load(tmp_path / "bin" / "pytorch_model.bin", weights_only=True)
    assert all(torch.equal(value, expected[name]) for name, value in loaded.items())
    accelerator.save_model(model, tmp_path / "shards", max_shard_size="100B")
    index = json.loads((tmp_path / "shards" / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 1 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    joined = {key: value for name in files for key, value in load_file(tmp_path / "shards" / name).items()}
    assert sorted(joined) == sorted(expected)
    accelerator.save_model(model, tmp_path / "shards")  # one file now: the shards and index of before go
    assert os.listdir(tmp_path / "shards") == ["model.safetensors"]
    with pytest.raises(MisconfigurationError, match="max_shard_size='ten'"):
        accelerator.save_model(model, tmp_path / "x", max_shard_size="ten")


def test_save_writes_on_the_main_process_as_torch_or_safetensors(tmp_path):
    from safetensors.torch import load_file

    accelerator = Accelerator(cpu=True)
    accelerator.save({"step": 3, "w": torch.ones(2)}, tmp_path / "extra.pt")
    assert torch.load(tmp_path / "extra.pt", weights_only=True)["step"] == 3
    accelerator.save({"w": torch.ones(2)}, tmp_path / "extra.bin", safe_serialization=True)
    assert torch.equal(load_file(tmp_path / "extra.bin")["w"], torch.ones(2))
