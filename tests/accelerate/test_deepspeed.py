"""The Accelerator on DeepSpeed's engine: launched with Accelerate's flags it trains as the plain loop; launched with
an Accelerate config file naming a DeepSpeed JSON config (``"auto"`` values, the config's own optimizer and
schedule through DummyOptim/DummyScheduler, ZeRO-3, bf16) it saves its state and resumes bitwise; the plugin
fills and checks the config as Accelerate does, and says what conflicts."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from framework.accelerate.utils import DeepSpeedPlugin, HfDeepSpeedConfig
from framework.errors import MisconfigurationError
from framework.strategies.deepspeed import deepspeed_available
from tests.accelerate.loops import plain_loop_in_accelerates_order
from tests.accelerate.test_launched import LAUNCH, ROOT, _run

SCRIPT = str(ROOT / "tests" / "accelerate" / "deepspeed_loop.py")
_MISSING = ("DeepSpeed is not installed (the deepspeed extra)" if not deepspeed_available() else
            "DeepSpeed builds its shared-memory op with a C++ compiler, and none is installed"
            if shutil.which(os.environ.get("CXX", "c++")) is None else None)
needs_deepspeed = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")
# A DeepSpeed config as Accelerate's DeepSpeed guide shows them (written for these tests): ZeRO-3, the optimizer
# and schedule named in the config, "auto" wherever Accelerate fills a value.
DS_CONFIG = {
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto", "torch_adam": True}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                       "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                          "reduce_bucket_size": 500000, "stage3_prefetch_bucket_size": 500000,
                          "stage3_param_persistence_threshold": 0,
                          "stage3_gather_16bit_weights_on_model_save": "auto"},
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "steps_per_print": 2000,
    "wall_clock_breakdown": False,
}
# The file `accelerate config` writes for DeepSpeed with a config file, bf16, 2 processes (GPUs asked for; this
# machine has none, so the ranks run on the CPU).
ACCELERATE_DEEPSPEED = """compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config:
  deepspeed_config_file: ds.json
  deepspeed_multinode_launcher: standard
  zero3_init_flag: true
distributed_type: DEEPSPEED
downcast_bf16: 'no'
enable_cpu_affinity: false
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
"""


def _ranks(folder, mode: str) -> list[dict]:
    """What each rank saw; and each rank ended its gloo threads before the interpreter's end, where one that lets
    go of a finished collective aborts a rank whose work was done (SIGABRT, a failed launch, under load)."""
    for rank in (0, 1):
        threads = folder / f"{mode}_rank{rank}.threads"
        if os.path.isdir("/proc/self/task"):
            assert "gloo" not in threads.read_text(), threads.read_text()
    return [torch.load(folder / f"{mode}_rank{rank}.pt", weights_only=False) for rank in (0, 1)]


@needs_deepspeed
def test_launched_with_deepspeed_flags_the_ranks_train_as_the_plain_loop(tmp_path):
    stage = 2
    _run([*LAUNCH, "--cpu", "--num_processes", "2", "--use_deepspeed", "--zero_stage", str(stage),
          "--gradient_accumulation_steps", "2", "--gradient_clipping", "0", SCRIPT, str(tmp_path), "torch"])
    reference = plain_loop_in_accelerates_order(accumulate=2, adamw=True)["weights"]
    for ran in _ranks(tmp_path, "torch"):
        assert ran["distributed_type"] == "DEEPSPEED" and ran["accumulation"] == 2
        assert ran["syncs"] == [False, True] * 8 and ran["unwrapped"] == "Sequential"
        assert ran["config"]["zero_optimization"]["stage"] == stage and "gradient_clipping" not in ran["config"]
        assert ran["config"]["train_batch_size"] == 4 * 2 * 2  # micro batch x accumulation x ranks
        assert ran["norms"][0] is None and ran["norms"][1] > 0  # the norm the engine's last step saw
        # a torch scheduler steps as Accelerate's prepared ones: num_processes times per optimizer step
        assert ran["scheduler"] == ["AcceleratedScheduler", 2 * 8]  # 8 optimizer steps
        for name, value in reference.items():  # fp32 master weights stepped as torch's AdamW steps them
            torch.testing.assert_close(ran["weights"][name], value, rtol=1e-5, atol=1e-6, msg=name)


@needs_deepspeed
def test_a_deepspeed_json_config_runs_its_optimizer_and_schedule_and_resumes_bitwise(tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps(DS_CONFIG))
    (tmp_path / "accelerate.yaml").write_text(ACCELERATE_DEEPSPEED)
    launch = [*LAUNCH, "--config_file", str(tmp_path / "accelerate.yaml"), SCRIPT, str(tmp_path)]
    _run([*launch, "dummy"], cwd=tmp_path)  # the config names ds.json relative to where the launcher runs
    _run([*launch, "resume"], cwd=tmp_path)
    whole, resumed = _ranks(tmp_path, "dummy"), _ranks(tmp_path, "resume")
    filled = whole[0]["config"]
    assert whole[0]["mixed_precision"] == "bf16" and filled["bf16"] == {"enabled": True}
    assert filled["optimizer"]["params"] == {"lr": 0.02, "weight_decay": 0.01, "torch_adam": True}
    assert filled["scheduler"]["params"] == {"warmup_min_lr": 0, "warmup_max_lr": 0.02, "warmup_num_steps": 2,
                                             "total_num_steps": 8}  # 16 steps over 2 processes
    assert filled["gradient_clipping"] == 1.0 and filled["train_micro_batch_size_per_gpu"] == 4
    assert filled["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is False
    assert whole[0]["lrs"][:3] == [0.0, 0.02, 0.02] and whole[0]["lrs"][7] == pytest.approx(0.02 / 6)
    assert whole[0]["scheduler"] == ["DeepSpeedSchedulerWrapper", 16 - 1]  # once a step, counted from -1
    assert (tmp_path / "state" / "pytorch_model").is_dir()  # DeepSpeed's files, inside Accelerate's folder
    for rank in (0, 1):
        assert resumed[rank]["losses"] == whole[rank]["losses"][8:]
        for name, value in whole[rank]["weights"].items():
            assert torch.equal(resumed[rank]["weights"][name], value), name


def test_the_plugin_builds_a_config_from_its_fields_or_the_launchers_variables(monkeypatch):
    plugin = DeepSpeedPlugin(zero_stage=3, offload_optimizer_device="cpu", gradient_clipping=0.5)
    config = plugin.deepspeed_config
    assert config["zero_optimization"]["stage"] == 3 and config["gradient_clipping"] == 0.5
    assert config["zero_optimization"]["offload_optimizer"] == {"device": "cpu"}
    assert config["train_micro_batch_size_per_gpu"] == "auto" and config["gradient_accumulation_steps"] == "auto"
    assert plugin.zero3_init_flag and plugin.hf_ds_config.is_zero3() and plugin.hf_ds_config.is_offload()
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "1")
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4")
    from_launcher = DeepSpeedPlugin()
    assert from_launcher.zero_stage == 1 and from_launcher.deepspeed_config["gradient_accumulation_steps"] == 4
    assert not from_launcher.zero3_init_flag and from_launcher.deepspeed_config["steps_per_print"] == float("inf")
    from_launcher.set_mixed_precision("bf16")
    assert from_launcher.deepspeed_config["bf16"] == {"enabled": True}
    assert from_launcher.deepspeed_config["fp16"] == {"enabled": False}


def test_a_config_file_fills_its_auto_values_from_the_plugin_and_conflicts_are_errors_naming_both(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(DS_CONFIG))
    plugin = DeepSpeedPlugin(hf_ds_config=str(path), gradient_accumulation_steps=2)
    assert plugin.deepspeed_config["gradient_accumulation_steps"] == 2
    assert plugin.get_value("zero_optimization.stage") == 3 and plugin.is_auto("train_batch_size")
    assert plugin.zero_stage == 3  # the fields say what the file holds, as scripts read them
    with pytest.raises(MisconfigurationError, match=r"ds zero_optimization\.stage=3 vs the plugin's or run's 2"):
        DeepSpeedPlugin(hf_ds_config=str(path), zero_stage=2)
    with pytest.raises(MisconfigurationError, match="enabled; change one"):
        DeepSpeedPlugin(hf_ds_config={**DS_CONFIG, "bf16": {"enabled": True}}).set_mixed_precision("fp16")
    assert HfDeepSpeedConfig(str(path)).get_value("optimizer.params.torch_adam") is True


@pytest.mark.parametrize(("arguments", "message"), [
    ({"hf_ds_config": "missing.json"}, r"hf_ds_config='missing.json': there is no such DeepSpeed config file"),
    ({"hf_ds_config": {"train_batch_size": 8}}, "has no zero_optimization block"),
    ({"offload_param_device": "gpu"}, r"offload_param_device='gpu'\): accepted 'none', 'cpu', 'nvme'"),
    ({"enable_msamp": True}, "MS-AMP|fp8"),
])
def test_bad_plugin_settings_are_errors_naming_them(arguments, message):
    with pytest.raises(MisconfigurationError, match=message):
        DeepSpeedPlugin(**arguments)


def _plugin(**zero: object) -> DeepSpeedPlugin:
    plugin = DeepSpeedPlugin(hf_ds_config={**DS_CONFIG, "zero_optimization": {"stage": 3, **zero}})
    plugin.deepspeed_config["gradient_accumulation_steps"] = 2  # what the Accelerator fills when it is made
    return plugin


def test_prepare_fills_the_auto_values_as_accelerate_does_and_names_those_it_cannot_fill():
    from types import SimpleNamespace

    from torch.utils.data import DataLoader

    from framework.accelerate.deepspeed import fill_auto_values
    from framework.accelerate.utils import DummyOptim, DummyScheduler

    plugin = _plugin(reduce_bucket_size="auto")
    accelerator = SimpleNamespace(deepspeed_plugin=plugin, num_processes=2)
    model = torch.nn.Linear(2, 2)
    model.config = SimpleNamespace(hidden_size=8)  # as a Transformers model carries it
    optimizer = DummyOptim(model.parameters(), lr=0.1)
    scheduler = DummyScheduler(optimizer, total_num_steps=11, warmup_num_steps=3)
    fill_auto_values(accelerator, (model, optimizer, DataLoader(range(10), batch_size=5), scheduler))
    config = plugin.deepspeed_config
    assert config["train_micro_batch_size_per_gpu"] == 5 and config["train_batch_size"] == 5 * 2 * 2
    assert config["zero_optimization"]["reduce_bucket_size"] == 64 and config["gradient_clipping"] == 1.0
    assert config["optimizer"]["params"]["lr"] == 0.1 and config["scheduler"]["params"]["total_num_steps"] == 6
    with pytest.raises(MisconfigurationError, match=r"reduce_bucket_size as \"auto\", which is filled from a "
                                                    r"Transformers model's config\.hidden_size; Linear has none"):
        fill_auto_values(SimpleNamespace(deepspeed_plugin=_plugin(reduce_bucket_size="auto"), num_processes=2),
                         (torch.nn.Linear(2, 2),))
    with pytest.raises(MisconfigurationError, match=r"names an optimizer .* pass DummyOptim\(\.\.\.\) instead"):
        linear = torch.nn.Linear(2, 2)
        fill_auto_values(SimpleNamespace(deepspeed_plugin=_plugin(), num_processes=2),
                         (linear, torch.optim.SGD(linear.parameters(), lr=0.1)))
