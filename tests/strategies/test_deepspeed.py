"""DeepSpeed itself on 2 CPU ranks (gloo, ``DS_ACCELERATOR=cpu``): its ZeRO stages train as DDP, resume exactly from
its checkpoint directories (complete ones only), and bad settings are clear errors. DeepSpeed builds a small C++
op with the system compiler the first time it runs; without a compiler these tests skip, saying so."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from torch.utils.data import DataLoader

import framework
from framework.callbacks import ModelCheckpoint
from framework.cli.main import main
from framework.errors import CheckpointError, MisconfigurationError
from framework.io.checkpoint_storage import is_complete_checkpoint, load_checkpoint
from framework.io.deepspeed_dir import is_deepspeed_checkpoint
from framework.strategies import DeepSpeedStrategy, FSDPStrategy, resolve_strategy
from framework.strategies.deepspeed import deepspeed_available
from framework.strategies.deepspeed_checkpoint import convert_zero_checkpoint_to_fp32_state_dict
from tests.strategies.test_sharded import Regressor, fitted, quiet_trainer, regression_data

pytestmark = [
    pytest.mark.skipif(not deepspeed_available(), reason="DeepSpeed is not installed (the deepspeed extra)"),
    pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None,
                       reason="DeepSpeed builds its shared-memory op with a C++ compiler, and none is installed"),
]
# DeepSpeed's fp32 master weights, reduced and stepped as DDP does: equal to DDP up to float summation order.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
# Optimizer offload that keeps torch's AdamW (DeepSpeedCPUAdam would build another op for a minute).
OFFLOAD = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
           "zero_force_ds_cpu_optimizer": False}


@pytest.fixture(scope="module")
def ddp_result():
    return fitted("ddp")


@pytest.mark.parametrize("strategy", ["deepspeed_stage_1", "deepspeed_stage_2", "deepspeed_stage_3", "offload"])
def test_each_stage_trains_as_ddp_with_clipping_accumulation_a_scheduler_and_uneven_validation(strategy, ddp_result):
    # fitted(): 2 epochs, gradient_clip_val=0.05, accumulate_grad_batches=2, StepLR, 9 validation samples on 2 ranks
    weights, metrics = fitted(DeepSpeedStrategy(config=OFFLOAD) if strategy == "offload" else strategy)
    for name, value in ddp_result[0].items():
        torch.testing.assert_close(weights[name], value, **TOLERANCE, msg=name)
    for name in ("loss", "val_loss"):
        torch.testing.assert_close(metrics[name], ddp_result[1][name], **TOLERANCE)


def _runtime_loop(runtime: framework.Runtime) -> dict[str, torch.Tensor] | None:
    """Lightning Fabric's way: the model called directly (through the engine), backward, step."""
    torch.manual_seed(0)
    model = Regressor()
    model, optimizer = runtime.setup(model, torch.optim.AdamW(model.parameters(), lr=0.05))
    for x, y in runtime.setup_dataloaders(DataLoader(regression_data(), batch_size=4)):
        runtime.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
    weights = runtime.strategy.full_module_state_dict(model)
    return weights if runtime.global_rank == 0 else None


def test_the_runtime_trains_on_deepspeeds_engine_as_on_ddp():
    ran = framework.Runtime(accelerator="cpu", devices=2, strategy="deepspeed_stage_3").launch(_runtime_loop)
    reference = framework.Runtime(accelerator="cpu", devices=2, strategy="ddp").launch(_runtime_loop)
    for name, value in reference.items():
        torch.testing.assert_close(ran[name], value, **TOLERANCE, msg=name)


def _checkpointing(directory: str, max_steps: int) -> framework.Trainer:
    return quiet_trainer(devices=2, strategy="deepspeed_stage_3", precision="bf16-mixed", max_steps=max_steps,
                         enable_checkpointing=True, callbacks=[ModelCheckpoint(
                             dirpath=directory, every_n_train_steps=3, save_last=True, save_top_k=-1)])


def _shuffled() -> DataLoader:
    return DataLoader(regression_data(), batch_size=4, shuffle=True)


def test_a_checkpoint_written_mid_epoch_resumes_to_the_uninterrupted_runs_weights(tmp_path):
    torch.manual_seed(0)
    uninterrupted = Regressor()
    _checkpointing(str(tmp_path / "whole"), 12).fit(uninterrupted, _shuffled())

    torch.manual_seed(0)
    _checkpointing(str(tmp_path / "run"), 6).fit(Regressor(), _shuffled())  # 8 steps an epoch: stops mid-epoch
    last = tmp_path / "run" / "last.ckpt"
    assert is_deepspeed_checkpoint(last) and is_complete_checkpoint(last)
    files = sorted(os.listdir(last / "checkpoint"))
    assert [name for name in files if "optim_states" in name] == [
        f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt" for rank in range(2)], files  # each rank's part
    state = load_checkpoint(last / "meta.pt")  # the run's own state, weights-only loadable, beside DeepSpeed's
    assert state["global_step"] == 6 and state["state_dict"] == {} and "loops" in state

    resumed = Regressor()
    trainer = _checkpointing(str(tmp_path / "run"), 12)
    trainer.fit(resumed, _shuffled(), ckpt_path="last")
    assert trainer.global_step == 12
    for name, value in resumed.state_dict().items():
        torch.testing.assert_close(value, uninterrupted.state_dict()[name], rtol=0, atol=0, msg=name)


def test_a_half_written_deepspeed_directory_is_never_chosen_as_last(tmp_path):
    torch.manual_seed(0)
    _checkpointing(str(tmp_path), 6).fit(Regressor(), _shuffled())
    newest = tmp_path / "last.ckpt"
    part = newest / "checkpoint" / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"
    part.write_bytes(part.read_bytes()[:100])  # a copy cut off
    assert not is_complete_checkpoint(newest)
    assert is_complete_checkpoint(tmp_path / "epoch=0-step=6.ckpt")
    with pytest.raises(CheckpointError, match="incomplete"):
        DeepSpeedStrategy().load_checkpoint(str(newest))


def test_consolidate_writes_the_whole_fp32_weights_and_fsdp_refuses_the_directory_saying_so(tmp_path):
    torch.manual_seed(0)
    trained = Regressor()
    _checkpointing(str(tmp_path / "run"), 3).fit(trained, _shuffled())
    last = str(tmp_path / "run" / "last.ckpt")
    with pytest.raises(CheckpointError, match="framework consolidate"):
        FSDPStrategy().load_checkpoint(last)

    assert main(["consolidate", last, str(tmp_path / "weights.ckpt")]) == 0
    whole = torch.load(tmp_path / "weights.ckpt", weights_only=True)
    assert whole["global_step"] == 3 and "optimizer_states" not in whole
    for name, value in trained.state_dict().items():  # the module trained in bf16: the fp32 master weights rounded
        torch.testing.assert_close(whole["state_dict"][name].bfloat16().float(), value, rtol=0, atol=0, msg=name)
    loaded = Regressor.load_from_checkpoint(tmp_path / "weights.ckpt")
    torch.testing.assert_close(loaded.state_dict(), whole["state_dict"])
    convert_zero_checkpoint_to_fp32_state_dict(last, tmp_path / "lightnings.ckpt")  # Lightning's name for it
    torch.testing.assert_close(torch.load(tmp_path / "lightnings.ckpt", weights_only=True)["state_dict"],
                               whole["state_dict"])


def test_the_lightning_names_build_deepspeed_with_their_stage_and_offload():
    expected = {"deepspeed": (2, False, False), "deepspeed_stage_1": (1, False, False),
                "deepspeed_stage_2": (2, False, False), "deepspeed_stage_2_offload": (2, True, False),
                "deepspeed_stage_3": (3, False, False), "deepspeed_stage_3_offload": (3, True, True)}
    for name, (stage, optimizer, parameters) in expected.items():
        strategy = resolve_strategy(name)
        zero = strategy.config["zero_optimization"]
        assert type(strategy) is DeepSpeedStrategy and strategy.zero_stage == stage, name
        assert ("offload_optimizer" in zero, "offload_param" in zero) == (optimizer, parameters), name


@pytest.mark.parametrize(("arguments", "message"), [
    ({"stage": 4}, r"stage=4.*0, 1, 2 or 3"),
    ({"config": {"zero_optimization": {"stage": 5}}}, r"zero_optimization.stage=5"),
    ({"stage": 3, "offload_optimizer": True, "offload_optimizer_device": "nvme", "nvme_path": "/no/such/dir"},
     r"nvme_path='/no/such/dir'.* is not an existing directory"),
    ({"config": "/no/such/ds_config.json"}, r"no such DeepSpeed config file"),
    ({"config": {"zero_optimization": {"stage": 2, "offload_param": {"device": "disk"}}}},
     r"offload_param.device='disk'"),
    ({"accelerator": "cuda"}, r"accelerator='cuda'.*Trainer\(accelerator=...\)"),
])
def test_bad_settings_are_errors_naming_them(arguments, message):
    with pytest.raises(MisconfigurationError, match=message):
        DeepSpeedStrategy(**arguments)


def test_a_config_that_contradicts_the_trainer_is_an_error_naming_both():
    trainer = quiet_trainer(devices=2, strategy=DeepSpeedStrategy(config={"gradient_accumulation_steps": 4}),
                            accumulate_grad_batches=2, max_steps=1)
    with pytest.raises(MisconfigurationError, match=r"accumulate_grad_batches.*gradient_accumulation_steps.*2.*4"):
        trainer.fit(Regressor(), DataLoader(regression_data(8), batch_size=4))
    with pytest.raises(MisconfigurationError, match=r"precision='bf16-mixed'.*fp16"):
        quiet_trainer(strategy=DeepSpeedStrategy(config={"fp16": {"enabled": True}}), precision="bf16-mixed").fit(
            Regressor(), DataLoader(regression_data(8), batch_size=4))
    with pytest.raises(MisconfigurationError, match="by norm only"):
        quiet_trainer(strategy="deepspeed", gradient_clip_val=1.0, gradient_clip_algorithm="value").fit(
            Regressor(), DataLoader(regression_data(8), batch_size=4))
