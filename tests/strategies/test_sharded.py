"""ZeRO-1/2/3 and CPU offload on CPU with gloo and real processes: equal to DDP, the memory the theory says,
sharded checkpoints that resume with another number of ranks, and consolidation to one file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import framework
from framework.callbacks import Callback, ModelCheckpoint
from framework.errors import MisconfigurationError
from framework.io.checkpoint_dir import is_sharded_checkpoint
from framework.strategies import DeepSpeedStrategy, FSDPStrategy, ShardedStrategy, resolve_strategy
from framework.testing import spawn, state_bytes

SHARDED = ["zero1", "zero2", "zero3", "zero3_offload"]


class Regressor(framework.Module):
    """A three-layer MLP in a Sequential (so the default policy shards it layer by layer), trained with AdamW."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y), sync_dist=True)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=0.01)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)}


def regression_data(count: int = 64) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(count, 8, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True).sin())


def quiet_trainer(**kwargs) -> framework.Trainer:
    settings = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False)
    return framework.Trainer(**{**settings, **kwargs})


def whole(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def fitted(strategy, devices: int = 2, **kwargs) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Weights and metrics after 2 epochs with clipping, accumulation and a validation set ranks split unevenly."""
    torch.manual_seed(0)
    model = Regressor()
    trainer = quiet_trainer(devices=devices, strategy=strategy, max_epochs=2, gradient_clip_val=0.05,
                            accumulate_grad_batches=2, **kwargs)
    trainer.fit(model, DataLoader(regression_data(), batch_size=4), DataLoader(regression_data(9), batch_size=4))
    return model.state_dict(), dict(trainer.callback_metrics)


@pytest.fixture(scope="module")
def ddp_result():
    return fitted("ddp")


# -- names and arguments ---

@pytest.mark.parametrize(("name", "kind", "reshard", "offload"), [
    ("zero1", ShardedStrategy, None, None), ("ddp_sharded", ShardedStrategy, None, None),
    ("zero2", FSDPStrategy, False, False), ("fsdp_shard_grad_op", FSDPStrategy, False, False),
    ("zero2_offload", FSDPStrategy, False, True), ("zero3", FSDPStrategy, True, False),
    ("fsdp", FSDPStrategy, True, False), ("zero3_offload", FSDPStrategy, True, True),
])
def test_strategy_names(name, kind, reshard, offload):
    strategy = resolve_strategy(name)
    assert type(strategy) is kind
    if reshard is not None:
        assert strategy.reshard_after_forward is reshard
        assert bool(strategy.cpu_offload) is offload


@pytest.mark.parametrize(("name", "kind", "reshard", "offload"), [
    ("deepspeed", FSDPStrategy, False, False), ("deepspeed_stage_1", ShardedStrategy, None, None),
    ("deepspeed_stage_2", FSDPStrategy, False, False), ("deepspeed_stage_2_offload", FSDPStrategy, False, True),
    ("deepspeed_stage_3", FSDPStrategy, True, False), ("deepspeed_stage_3_offload", FSDPStrategy, True, True),
    ("deepspeed_stage_3_offload_nvme", FSDPStrategy, True, True),
])
def test_without_deepspeed_its_names_run_the_same_zero_stage_on_fsdp2_saying_so_once(name, kind, reshard, offload,
                                                                                      monkeypatch):
    from framework.strategies import registry

    monkeypatch.setitem(sys.modules, "deepspeed", None)  # what an environment without DeepSpeed imports
    monkeypatch.setattr(registry, "_told_instead", set())
    with pytest.warns(UserWarning, match=rf"strategy='{name}': DeepSpeed is not installed.*framework\[deepspeed\]"):
        strategy = resolve_strategy(name)
    assert type(strategy) is kind
    if reshard is not None:
        assert strategy.reshard_after_forward is reshard and bool(strategy.cpu_offload) is offload
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resolve_strategy(name)  # said once
    with pytest.raises(MisconfigurationError, match=r"DeepSpeedStrategy needs DeepSpeed.*framework\[deepspeed\]"):
        DeepSpeedStrategy()


def test_bad_fsdp_arguments_name_the_argument_and_what_is_accepted():
    with pytest.raises(framework.MisconfigurationError, match="sharding_strategy='NO_SHARD'.*'FULL_SHARD'.*ddp"):
        FSDPStrategy(sharding_strategy="NO_SHARD")
    with pytest.raises(framework.MisconfigurationError, match="state_dict_type='local'.*'sharded' or 'full'"):
        FSDPStrategy(state_dict_type="local")
    with pytest.raises(framework.MisconfigurationError, match="auto_wrap_policy=3.*set of module classes"):
        FSDPStrategy(auto_wrap_policy=3)
    with pytest.raises(framework.MisconfigurationError, match="activation_checkpointing_policy=3"):
        FSDPStrategy(activation_checkpointing_policy=3)
    with pytest.raises(framework.MisconfigurationError, match="cpu_offload='no'.*True, False or a"):
        FSDPStrategy(cpu_offload="no")
    with pytest.raises(framework.MisconfigurationError, match="got unknown= which neither.*fully_shard's: .*"):
        FSDPStrategy(unknown=1)


def test_default_policy_shards_each_block_and_big_submodules():
    from framework.strategies.fsdp_policy import BLOCK_PARAMETERS, units_to_shard, wrap_policy

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(BLOCK_PARAMETERS // 10, 10)  # big, outside any container
            self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3)])
            self.head = nn.Linear(4, 2)  # small: stays with the root

    model = Model()
    units = units_to_shard(model, wrap_policy("auto"))
    assert set(map(id, units)) == {id(model.embedding), *map(id, model.blocks)}
    assert units_to_shard(model, wrap_policy(None)) == []
    by_class = units_to_shard(model, wrap_policy({nn.Linear}))
    assert all(isinstance(unit, nn.Linear) for unit in by_class) and len(by_class) == 4
    import functools

    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    fsdp1_form = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.Linear})  # Lightning's
    assert units_to_shard(model, wrap_policy(fsdp1_form)) == by_class


# -- training equals DDP ---

@pytest.mark.parametrize("strategy", SHARDED)
def test_sharded_strategies_train_as_ddp(strategy, ddp_result):
    weights, metrics = fitted(strategy)
    reference, reference_metrics = ddp_result
    assert weights.keys() == reference.keys()
    for name, value in weights.items():  # fp32; only the order of summation differs
        torch.testing.assert_close(value, reference[name], rtol=1e-5, atol=1e-6, msg=name)
    torch.testing.assert_close(metrics["val_loss"], reference_metrics["val_loss"], rtol=1e-5, atol=1e-6)


class CompiledRegressor(Regressor):
    """Logs whether its steps run compiled, which reaches the caller from rank 0."""

    def training_step(self, batch, batch_idx):
        self.log("compiled_training", float(torch.compiler.is_compiling()))
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        self.log("compiled_validation", float(torch.compiler.is_compiling()))
        super().validation_step(batch, batch_idx)


@pytest.mark.parametrize("strategy", ["ddp", "zero1", "zero3"])
def test_compiled_steps_train_as_eager_ddp_on_every_strategy(strategy, ddp_result):
    torch.manual_seed(0)
    model = CompiledRegressor()
    trainer = quiet_trainer(devices=2, strategy=strategy, max_epochs=2, gradient_clip_val=0.05,
                            accumulate_grad_batches=2, compile={"backend": "aot_eager"})
    trainer.fit(model, DataLoader(regression_data(), batch_size=4), DataLoader(regression_data(9), batch_size=4))
    metrics = trainer.callback_metrics
    assert metrics["compiled_training"] == 1 and metrics["compiled_validation"] == 1
    reference, reference_metrics = ddp_result
    for name, value in model.state_dict().items():  # AOTAutograd may order the arithmetic its own way
        torch.testing.assert_close(value, reference[name], rtol=1e-5, atol=1e-6, msg=name)
    torch.testing.assert_close(metrics["val_loss"], reference_metrics["val_loss"], rtol=1e-5, atol=1e-6)


def test_zero3_on_four_ranks_trains_as_ddp():
    reference, _ = fitted("ddp", devices=4)
    weights, _ = fitted("zero3", devices=4)
    for name, value in weights.items():
        torch.testing.assert_close(value, reference[name], rtol=1e-5, atol=1e-6, msg=name)


def test_zero3_in_float16_trains_like_ddp():
    reference, _ = fitted("ddp", precision="16-mixed")
    weights, _ = fitted("zero3", precision="16-mixed")
    for name, value in weights.items():
        torch.testing.assert_close(value, reference[name], rtol=1e-3, atol=1e-3, msg=name)


def _step_with_overflow_in_one_part(rank: int) -> tuple[bool, bool, bool]:
    runtime = framework.Runtime(accelerator="cpu", devices=2, strategy="zero3", precision="16-mixed")
    torch.manual_seed(0)
    layer = nn.Linear(4, 4)  # rows 0-1 are rank 0's part, rows 2-3 rank 1's
    layer, optimizer = runtime.setup(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
    before = whole(layer.module.weight).detach().clone()
    with runtime.autocast():
        out = layer(torch.ones(2, 4))
    # the gradient of output 3 overflows float16: only rank 1's part of the gradients holds inf
    runtime.backward(out[:, 0].float().sum() * 1e-3 + out[:, 3].float().sum() * 1e30)
    own_part_finite = all(bool(torch.isfinite(p.grad.to_local()).all()) for p in layer.parameters())
    stepped = runtime.optimizer_step(optimizer)
    return own_part_finite, stepped, torch.equal(whole(layer.module.weight).detach(), before)


def test_zero3_in_float16_skips_a_step_on_every_rank_when_one_rank_part_overflows():
    (finite_on_0, stepped_0, unchanged_0), (finite_on_1, stepped_1, unchanged_1) = spawn(
        2, _step_with_overflow_in_one_part)
    assert finite_on_0 and not finite_on_1  # the situation: only rank 1 sees the overflow in its own part
    # GradScaler's check runs on the DTensor gradients, so its verdict is already the ranks' together
    assert not stepped_0 and not stepped_1
    assert unchanged_0 and unchanged_1


# -- memory: the bytes each rank holds ---

class _TrainsLayers(framework.Module):
    """The training step and optimizer of a Module whose ``layers`` are four 64x64 linears."""

    def training_step(self, batch, batch_idx):
        return self.layers(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class _Blocks(_TrainsLayers):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(64, 64) for _ in range(4)])


class _MeasureState(Callback):
    """Parameters right after forward, gradients after backward, optimizer state after the step."""

    def on_before_backward(self, trainer, module, loss):
        self.parameters = state_bytes(module)["parameters"]

    def on_after_backward(self, trainer, module):
        self.gradients = state_bytes(module)["gradients"]

    def on_before_zero_grad(self, trainer, module, optimizer):
        self.optimizer = state_bytes(module, optimizer)["optimizer"]


def _measure_on_rank(rank: int, strategy: str) -> tuple[int, int, int]:
    measure = _MeasureState()
    trainer = quiet_trainer(devices=2, strategy=strategy, max_steps=2, callbacks=[measure])
    trainer.fit(_Blocks(), DataLoader(TensorDataset(torch.randn(32, 64)), batch_size=4))
    return measure.parameters, measure.gradients, measure.optimizer


@pytest.mark.parametrize(("strategy", "theory"), [
    ("ddp", (4, 4, 8)), ("zero1", (4, 4, 4)), ("zero2", (4, 2, 4)), ("zero3", (2, 2, 4)), ("zero3_offload", (2, 2, 4)),
])
def test_each_rank_holds_what_the_zero_arithmetic_says(strategy, theory):
    """Ψ fp32 parameters with Adam on 2 ranks, given only the strategy's name: bytes per Ψ as in the ZeRO paper."""
    psi = sum(p.numel() for p in _Blocks().parameters())
    for held in spawn(2, _measure_on_rank, strategy):
        for measured, expected in zip(held, theory, strict=True):
            assert measured == pytest.approx(expected * psi, rel=0.10), (strategy, held, theory)


# -- a model built sharded on the meta device ---

class _BuiltSharded(_TrainsLayers):
    """Its layers are created on the meta device in configure_model: no rank ever allocates them whole."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = None

    def configure_model(self):
        if self.layers is not None:
            return
        with torch.device("meta"):
            self.layers = nn.Sequential(*[nn.Linear(64, 64) for _ in range(4)])


class _HeldAtStart(Callback):
    def on_fit_start(self, trainer, module):
        self.held = state_bytes(module)["parameters"]
        self.on_meta = any(p.is_meta for p in module.parameters())


def _train_built_sharded(rank: int) -> tuple[int, bool, bool, float]:
    seen = _HeldAtStart()
    model = _BuiltSharded()
    before = None
    trainer = quiet_trainer(devices=2, strategy="zero3", max_steps=3, callbacks=[seen])
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(32, 64)), batch_size=4))
    weight = whole(model.layers[0].weight).detach()
    before = weight.std().item()
    return seen.held, seen.on_meta, bool((weight[:32] != weight[32:]).any()), before


def test_a_model_built_on_the_meta_device_is_allocated_sharded_initialised_and_trained():
    whole_bytes = sum(p.numel() * 4 for p in nn.Sequential(*[nn.Linear(64, 64) for _ in range(4)]).parameters())
    for held, on_meta, halves_differ, spread in spawn(2, _train_built_sharded):
        assert held == whole_bytes // 2  # each rank allocated its half only
        assert not on_meta
        assert halves_differ  # the ranks' parts were initialised from different random numbers
        assert 0.05 < spread < 0.1  # nn.Linear's own init: uniform(±1/8) has std 0.072

    model = _BuiltSharded()  # started by the Trainer: the weights come back whole to the caller's Module
    quiet_trainer(devices=2, strategy="zero3", max_steps=2).fit(
        model, DataLoader(TensorDataset(torch.randn(32, 64)), batch_size=4))
    assert not model.layers[0].weight.is_meta and model.layers[0].weight.std() > 0.05


# -- sharded checkpoints ---

def _checkpointing_trainer(devices: int, dirpath: str, max_steps: int) -> framework.Trainer:
    checkpoint = ModelCheckpoint(dirpath=dirpath, save_last=True, save_top_k=2, monitor="loss", every_n_train_steps=2)
    return quiet_trainer(devices=devices, strategy="zero3", max_steps=max_steps, enable_checkpointing=True,
                         callbacks=[checkpoint], gradient_clip_val=0.05)


def _shuffled(devices: int) -> DataLoader:
    return DataLoader(regression_data(), batch_size=8 // devices, shuffle=True)  # 8 samples per step on any count


@pytest.mark.parametrize(("saved_on", "resumed_on"), [(2, 4), (4, 2)])
def test_a_sharded_checkpoint_resumes_on_another_number_of_ranks(tmp_path, saved_on, resumed_on):
    torch.manual_seed(0)
    uninterrupted = Regressor()
    _checkpointing_trainer(saved_on, str(tmp_path / "whole"), 12).fit(uninterrupted, _shuffled(saved_on))

    torch.manual_seed(0)
    first = Regressor()
    _checkpointing_trainer(saved_on, str(tmp_path / "run"), 6).fit(first, _shuffled(saved_on))  # mid-epoch 1
    last = tmp_path / "run" / "last.ckpt"
    assert is_sharded_checkpoint(last)
    assert sorted(name for name in os.listdir(last) if name.endswith(".distcp")) == \
        [f"__{rank}_0.distcp" for rank in range(saved_on)]  # every rank wrote its part
    kept = sorted(os.listdir(tmp_path / "run"))  # top-2 of the three saves, and last: the third was removed whole
    assert len(kept) == 3 and "last.ckpt" in kept and all(is_sharded_checkpoint(tmp_path / "run" / n) for n in kept)

    resumed = Regressor()
    trainer = _checkpointing_trainer(resumed_on, str(tmp_path / "run"), 12)
    trainer.fit(resumed, _shuffled(resumed_on), ckpt_path=str(last))
    assert trainer.global_step == 12
    for name, value in resumed.state_dict().items():
        torch.testing.assert_close(value, uninterrupted.state_dict()[name], rtol=1e-5, atol=1e-6, msg=name)


def test_consolidate_writes_one_file_that_loads_on_one_process(tmp_path):
    torch.manual_seed(0)
    model = Regressor()
    _checkpointing_trainer(2, str(tmp_path / "run"), 6).fit(model, _shuffled(2))
    output = tmp_path / "whole.ckpt"
    finished = subprocess.run([sys.executable, "-m", "framework", "consolidate", str(tmp_path / "run" / "last.ckpt"),
                               str(output)], capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr

    checkpoint = torch.load(output, weights_only=True)
    assert checkpoint["global_step"] == 6
    assert set(checkpoint["optimizer_states"][0]["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    assert checkpoint["optimizer_states"][0]["state"][0]["exp_avg"].shape == (16, 8)  # whole, not a rank's part
    loaded = Regressor.load_from_checkpoint(str(output))
    x = torch.randn(5, 8)
    torch.testing.assert_close(loaded(x), model(x))
    directly = Regressor.load_from_checkpoint(str(tmp_path / "run" / "last.ckpt"))  # the directory, read whole
    torch.testing.assert_close(directly(x), model(x))

    # one process resumes the consolidated file and trains on
    single = quiet_trainer(max_steps=8)
    single.fit(Regressor(), DataLoader(regression_data(), batch_size=8), ckpt_path=str(output))
    assert single.global_step == 8


def test_consolidate_explains_a_path_that_is_not_a_sharded_checkpoint(tmp_path, capsys):
    from framework.cli.main import main

    file = tmp_path / "model.ckpt"
    torch.save({"state_dict": {}}, file)
    for path, reason in ((file, "one file already"), (tmp_path / "missing", "does not exist")):
        assert main(["consolidate", str(path), str(tmp_path / "out.ckpt")]) == 1
        assert reason in capsys.readouterr().err
    assert not (tmp_path / "out.ckpt").exists()
    assert main(["consolidate", str(file), str(tmp_path)]) == 1
    assert "is a directory; name the file to write" in capsys.readouterr().err


def test_full_state_dict_type_saves_one_whole_file_that_zero3_resumes(tmp_path):
    model = Regressor()
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0)
    quiet_trainer(devices=2, strategy=FSDPStrategy(state_dict_type="full"), max_steps=2, enable_checkpointing=True,
                  callbacks=[checkpoint]).fit(model, DataLoader(regression_data(), batch_size=4))
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)  # a file, written by rank 0 from the ranks' parts
    assert saved["state_dict"]["net.0.weight"].shape == (16, 8)
    assert saved["optimizer_states"][0]["state"][0]["exp_avg"].shape == (16, 8)
    torch.testing.assert_close(saved["state_dict"]["net.0.weight"], model.state_dict()["net.0.weight"])
    resumed = quiet_trainer(devices=2, strategy="zero3", max_steps=4)
    resumed.fit(Regressor(), DataLoader(regression_data(), batch_size=4), ckpt_path=str(tmp_path / "last.ckpt"))
    assert resumed.global_step == 4


# -- the Runtime ---

def _runtime_training(runtime: framework.Runtime) -> tuple[dict[str, torch.Tensor], list[float]]:
    torch.manual_seed(0)
    model = Regressor()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)  # made before setup, as with DDP
    model, optimizer = runtime.setup(model, optimizer)
    loader = runtime.setup_dataloaders(DataLoader(regression_data(), batch_size=4))
    norms = []
    for x, y in loader:
        runtime.backward(nn.functional.mse_loss(model(x), y))
        norms.append(float(runtime.clip_gradients(model, optimizer, max_norm=0.05)))
        optimizer.step()
        optimizer.zero_grad()
    return {name: whole(value).detach().clone() for name, value in model.state_dict().items()}, norms


def test_runtime_setup_points_an_optimizer_made_before_it_at_the_sharded_parameters():
    reference, reference_norms = framework.Runtime(accelerator="cpu", devices=2, strategy="ddp").launch(
        _runtime_training)
    sharded, norms = framework.Runtime(accelerator="cpu", devices=2, strategy="zero3").launch(_runtime_training)
    assert min(reference_norms) > 0.05  # every step clipped
    assert norms == pytest.approx(reference_norms, rel=1e-5)  # the whole model's norm, not a rank's part's
    for name, value in sharded.items():
        torch.testing.assert_close(value, reference[name], rtol=1e-5, atol=1e-6, msg=name)


# -- policies and precision ---

class _ShardsItself(Regressor):
    """Applies its own sharding in configure_model; the strategy keeps those units."""

    def configure_model(self):
        from torch.distributed.fsdp import FSDPModule, fully_shard

        if not isinstance(self.net[0], FSDPModule):
            for layer in (self.net[0], self.net[2]):
                fully_shard(layer)


class _CountUnits(Callback):
    def on_fit_start(self, trainer, module):
        from torch.distributed.fsdp import FSDPModule

        trainer.units = sorted(name for name, sub in module.named_modules() if isinstance(sub, FSDPModule))


def _units_on_rank(rank: int, strategy: FSDPStrategy, own: bool) -> list[str]:
    trainer = quiet_trainer(devices=2, strategy=strategy, max_steps=1, callbacks=[_CountUnits()])
    trainer.fit(_ShardsItself() if own else Regressor(), DataLoader(regression_data(), batch_size=4))
    return trainer.units


def test_a_module_sharding_itself_in_configure_model_keeps_its_units():
    own, default = spawn(2, _units_on_rank, FSDPStrategy(), True)[0], spawn(2, _units_on_rank, FSDPStrategy(), False)[0]
    assert own == ["net.0", "net.2"]  # its own two, not the default's three (the root router is outside the Module)
    assert default == ["net.0", "net.2", "net.4"]
    assert spawn(2, _units_on_rank, FSDPStrategy(auto_wrap_policy=None), False)[0] == []


def test_activation_checkpointing_keeps_parameter_names_and_trains_as_ddp(ddp_result):
    weights, _ = fitted(FSDPStrategy(activation_checkpointing_policy={nn.Linear}))
    for name, value in weights.items():  # the parameter names stay as they were
        torch.testing.assert_close(value, ddp_result[0][name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize(("precision", "param_dtype"), [("32-true", None), ("bf16-mixed", None),
                                                        ("bf16-true", torch.bfloat16)])
def test_the_precision_gives_fully_shard_its_mixed_precision_policy(precision, param_dtype):
    strategy = FSDPStrategy()
    runtime = framework.Runtime(accelerator="cpu", strategy=strategy, precision=precision)
    assert runtime.strategy is strategy
    strategy._mesh = object()  # the options only, without starting a process group
    policy = strategy._shard_options()["mp_policy"]
    assert policy.param_dtype == param_dtype and policy.reduce_dtype == runtime.precision.reduce_dtype


# -- failures ---

class _FailsOnRankZero(Regressor):
    def training_step(self, batch, batch_idx):
        if self.global_rank == 0 and batch_idx == 2:
            raise ValueError("stopped here")
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("strategy", [ShardedStrategy(timeout=30), FSDPStrategy(timeout=30)], ids=["zero1", "zero3"])
def test_save_on_exception_with_sharded_state_skips_the_save_instead_of_waiting_for_the_others(tmp_path, strategy):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_on_exception=True)
    trainer = quiet_trainer(devices=2, max_epochs=1, enable_checkpointing=True, callbacks=[checkpoint],
                            strategy=strategy)
    started = time.monotonic()
    with pytest.raises(ValueError, match="stopped here"):  # the rank's own error, not a collective's timeout
        trainer.fit(_FailsOnRankZero(), DataLoader(regression_data(), batch_size=4))
    assert time.monotonic() - started < 20
    assert os.listdir(tmp_path) == []  # one rank cannot write the others' parts


# -- one process, spawned ranks, init_module ---

def test_zero3_on_one_device_trains_as_one_process(ddp_result):
    torch.manual_seed(0)
    single = Regressor()
    quiet_trainer(max_steps=4).fit(single, DataLoader(regression_data(), batch_size=8))
    torch.manual_seed(0)
    sharded = Regressor()
    quiet_trainer(max_steps=4, strategy="zero3").fit(sharded, DataLoader(regression_data(), batch_size=8))
    for name, value in sharded.state_dict().items():  # this process's Module is the sharded one: its DTensors
        torch.testing.assert_close(whole(value), single.state_dict()[name], rtol=1e-5, atol=1e-6, msg=name)


def test_spawned_ranks_get_the_strategy_and_its_policies_pickled(ddp_result):
    strategy = FSDPStrategy(auto_wrap_policy={nn.Linear}, start_method="spawn")
    weights, _ = fitted(strategy)
    for name, value in weights.items():
        torch.testing.assert_close(value, ddp_result[0][name], rtol=1e-5, atol=1e-6, msg=name)


def _init_module_on_rank(rank: int) -> tuple[bool, int]:
    trainer = quiet_trainer(devices=2, strategy="zero3", max_steps=1)
    with trainer.init_module(empty_init=True):
        model = _Blocks()
    on_meta = model.layers[0].weight.is_meta
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(8, 64)), batch_size=4))
    return on_meta, state_bytes(model)["parameters"]


def test_init_module_with_empty_init_builds_on_the_meta_device_and_fit_allocates_the_parts():
    psi = sum(p.numel() for p in _Blocks().parameters())
    for on_meta, held in spawn(2, _init_module_on_rank):
        assert on_meta
        assert held == psi * 4 // 2


def test_save_last_link_points_at_the_sharded_directory_and_resumes(tmp_path):
    def trainer(max_steps):
        checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last="link", every_n_train_steps=2, save_top_k=-1)
        return quiet_trainer(devices=2, strategy="zero3", max_steps=max_steps, enable_checkpointing=True,
                             callbacks=[checkpoint])

    trainer(4).fit(Regressor(), DataLoader(regression_data(), batch_size=4))
    last = tmp_path / "last.ckpt"
    assert last.is_symlink() and is_sharded_checkpoint(last)
    assert os.readlink(last) == "epoch=0-step=4.ckpt"
    resumed = trainer(6)
    resumed.fit(Regressor(), DataLoader(regression_data(), batch_size=4), ckpt_path="last")
    assert resumed.global_step == 6 and os.readlink(last) == "epoch=0-step=6.ckpt"
    assert sorted(os.listdir(tmp_path)) == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt", "epoch=0-step=6.ckpt",
                                            "last.ckpt"]
    assert all(is_sharded_checkpoint(tmp_path / name) for name in os.listdir(tmp_path))  # re-linking kept them whole


def _save_and_load_with_runtime(runtime: framework.Runtime, path: str) -> tuple[bool, bool, int]:
    torch.manual_seed(0)
    model = Regressor()
    model, optimizer = runtime.setup(model, torch.optim.AdamW(model.parameters(), lr=0.01))
    for x, y in runtime.setup_dataloaders(DataLoader(regression_data(16), batch_size=4)):
        runtime.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
    runtime.save(path, {"model": model, "optimizer": optimizer, "step": 4})
    fresh = Regressor()
    fresh_model, fresh_optimizer = runtime.setup(fresh, torch.optim.AdamW(fresh.parameters(), lr=0.01))
    state = {"model": fresh_model, "optimizer": fresh_optimizer, "step": 0}
    runtime.load(path, state)
    same_weights = all(torch.equal(whole(a), whole(b)) for a, b in
                       zip(model.state_dict().values(), fresh_model.state_dict().values(), strict=True))
    moments = [whole(s["exp_avg"]) for s in optimizer.state.values()]
    loaded = [whole(s["exp_avg"]) for s in fresh_optimizer.state.values()]
    same_moments = len(moments) == len(loaded) == 6 and all(map(torch.equal, moments, loaded))
    return same_weights, same_moments, state["step"]


def test_runtime_save_and_load_round_trip_a_sharded_checkpoint(tmp_path):
    runtime = framework.Runtime(accelerator="cpu", devices=2, strategy="zero3")
    assert runtime.launch(_save_and_load_with_runtime, str(tmp_path / "state")) == (True, True, 4)
    assert is_sharded_checkpoint(tmp_path / "state")


# -- what the hooks see ---

class _Observed(Regressor):
    def configure_optimizers(self):
        self.sharded_when_configured = all(hasattr(p, "to_local") for p in self.parameters())
        optimizer = torch.optim.AdamW(self.parameters(), lr=0.01)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class _MicroBatchGradients(Callback):
    def __init__(self) -> None:
        self.held = []

    def on_after_backward(self, trainer, module):
        self.held.append(state_bytes(module)["gradients"])


def _observe_on_rank(rank: int, strategy: str) -> tuple[bool, list[int], list[str]]:
    import warnings

    gradients = _MicroBatchGradients()
    model = _Observed()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_trainer(devices=2, strategy=strategy, max_steps=2, accumulate_grad_batches=2,
                      callbacks=[gradients]).fit(model, DataLoader(regression_data(), batch_size=4))
    return model.sharded_when_configured, gradients.held, [str(w.message) for w in caught]


def test_configure_optimizers_sees_sharded_parameters_and_micro_batches_are_not_reduced():
    for sharded, held, _ in spawn(2, _observe_on_rank, "zero3"):
        assert sharded
        # after each micro-batch's backward: nothing reduced yet (no sharded gradient); after the last, a half
        psi_bytes = sum(p.numel() * 4 for p in Regressor().parameters())
        assert held[0] == 0 and held[2] == 0
        assert held[1] == pytest.approx(psi_bytes / 2, rel=0.1) and held[3] == held[1]


def test_zero1_steps_the_lr_scheduler_without_a_warning_about_the_order():
    for _, _, messages in spawn(2, _observe_on_rank, "zero1"):
        assert not [m for m in messages if "lr_scheduler.step()" in m], messages


class _Predictor(Regressor):
    def predict_step(self, batch, batch_idx):
        return self(batch[0])


def _predictions(strategy: str, devices: int) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = _Predictor()
    trainer = quiet_trainer(devices=devices, strategy=strategy)
    return trainer.predict(model, DataLoader(regression_data(9), batch_size=4))


def test_predict_with_zero3_gives_the_single_process_predictions_in_order():
    expected = torch.cat(_predictions("auto", 1))
    torch.testing.assert_close(torch.cat(_predictions("zero3", 2)), expected)


# -- evaluation that ranks run unevenly, before and between training ---

class _RankOwnStream(torch.utils.data.IterableDataset):
    """Rank 0's stream is empty, rank 1's has three samples: hand-sharded data as it comes."""

    def __iter__(self):
        count = 0 if torch.distributed.get_rank() == 0 else 3
        yield from (regression_data(3)[index] for index in range(count))


def _uneven_evaluation_then_training(rank: int, strategy_name: str) -> int:
    sharding = "FULL_SHARD" if strategy_name == "zero3" else "SHARD_GRAD_OP"
    trainer = quiet_trainer(devices=2, strategy=FSDPStrategy(sharding_strategy=sharding, timeout=20), max_epochs=1,
                            num_sanity_val_steps=2)
    model = Regressor()
    trainer.validate(model, DataLoader(_RankOwnStream(), batch_size=1), verbose=False)  # no inference tensors
    trainer.fit(model, DataLoader(regression_data(), batch_size=4), DataLoader(_RankOwnStream(), batch_size=1))
    return trainer.global_step


@pytest.mark.parametrize("strategy_name", ["zero2", "zero3"])
def test_a_rank_with_no_evaluation_batches_does_not_upset_the_training_that_follows(strategy_name):
    assert spawn(2, _uneven_evaluation_then_training, strategy_name, timeout=40) == [8, 8]


def test_validate_first_on_one_device_under_zero3_runs_without_inference_tensors():
    results = quiet_trainer(strategy="zero3").validate(Regressor(), DataLoader(regression_data(8), batch_size=4),
                                                        verbose=False)
    assert results[0]["val_loss"] > 0


def test_zero1_resumes_with_the_lr_its_scheduler_sets(tmp_path):
    """ZeRO's load_state_dict makes new parameter groups: the LR scheduler must still steer the ones stepped."""
    def run(max_epochs, model, ckpt_path=None):
        checkpoint = ModelCheckpoint(dirpath=tmp_path / str(max_epochs), save_last=True)
        trainer = quiet_trainer(devices=2, strategy="zero1", max_epochs=max_epochs, enable_checkpointing=True,
                                callbacks=[checkpoint])
        trainer.fit(model, DataLoader(regression_data(), batch_size=8), ckpt_path=ckpt_path)

    torch.manual_seed(0)
    uninterrupted = Regressor()
    run(3, uninterrupted)
    torch.manual_seed(0)
    run(1, Regressor())
    resumed = Regressor()
    run(3, resumed, ckpt_path=str(tmp_path / "1" / "last.ckpt"))
    for name, value in resumed.state_dict().items():
        torch.testing.assert_close(value, uninterrupted.state_dict()[name], rtol=1e-5, atol=1e-6, msg=name)


def _second_trainer_on_rank(rank: int) -> tuple[float, int]:
    torch.manual_seed(0)
    model = Regressor()
    quiet_trainer(devices=2, strategy="zero3", max_epochs=1).fit(model, DataLoader(regression_data(), batch_size=4))
    second = quiet_trainer(devices=2, strategy="zero3", max_epochs=1)
    results = second.validate(model, DataLoader(regression_data(8), batch_size=4), verbose=False)
    second.fit(model, DataLoader(regression_data(), batch_size=4))
    return results[0]["val_loss"], second.global_step


def test_a_module_sharded_by_one_trainer_serves_another_in_the_same_ranks():
    (loss_0, steps_0), (loss_1, steps_1) = spawn(2, _second_trainer_on_rank)
    assert loss_0 == loss_1 > 0 and steps_0 == steps_1 == 8


def _optimizer_made_before_setup_module(runtime: framework.Runtime) -> str:
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    runtime.setup_module(model)
    with pytest.raises(framework.MisconfigurationError, match="SGD holds 6 parameter.*not sharded.*runtime.setup"):
        runtime.setup_optimizers(optimizer)
    return "refused"


def test_an_optimizer_made_before_setup_module_is_refused_with_what_to_do():
    runtime = framework.Runtime(accelerator="cpu", devices=2, strategy="zero3")
    assert runtime.launch(_optimizer_made_before_setup_module) == "refused"


class _Normalised(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 1))


def test_sharded_checkpoints_hold_rank_zero_buffers_as_the_returned_module_does(tmp_path):
    model = _Normalised()
    checkpoint = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    quiet_trainer(devices=2, strategy="zero3", max_epochs=1, enable_checkpointing=True, callbacks=[checkpoint]).fit(
        model, DataLoader(regression_data(), batch_size=4, shuffle=True))
    saved = _Normalised.load_from_checkpoint(str(tmp_path / "last.ckpt"))
    for name in ("net.1.running_mean", "net.1.running_var"):  # each rank's statistics drift apart under FSDP
        torch.testing.assert_close(saved.state_dict()[name], model.state_dict()[name], msg=name)


class _ScaledOnMeta(_BuiltSharded):
    def configure_model(self):
        if self.layers is not None:
            return
        with torch.device("meta"):
            self.layers = nn.Sequential(nn.Linear(64, 64), _Scale())


class _Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(64))  # no reset_parameters: nothing can initialise it again

    def forward(self, x):
        return x * self.weight


def test_layers_on_the_meta_device_without_reset_parameters_are_named_in_a_warning():
    with pytest.warns(UserWarning, match=r"nothing initialised \(they have no reset_parameters\(\)\): layers\.1\."):
        quiet_trainer(strategy="zero3", max_steps=1).fit(_ScaledOnMeta(),
                                                         DataLoader(TensorDataset(torch.randn(8, 64)), batch_size=4))


@pytest.mark.parametrize("strategy", ["ddp", "zero3"])
def test_launched_bf16_true_runs_hand_back_a_bf16_module_as_one_process_does(strategy):
    model = Regressor()
    quiet_trainer(devices=2, strategy=strategy, precision="bf16-true", max_steps=2).fit(
        model, DataLoader(regression_data(), batch_size=4))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


class _ForwardTwice(framework.Module):
    """A forward whose output the loss does not use (an inspection, say), then the one it does."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def training_step(self, batch, batch_idx):
        self(batch[0])
        return self(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _GradientsPresent(Callback):
    def on_after_backward(self, trainer, module):
        self.present = {name: p.grad is not None for name, p in module.named_parameters()}


def test_a_second_forward_under_autocast_keeps_every_gradient():
    seen = _GradientsPresent()
    quiet_trainer(strategy="zero3", precision="bf16-mixed", max_steps=1, callbacks=[seen]).fit(
        _ForwardTwice(), DataLoader(TensorDataset(torch.randn(8, 16)), batch_size=8))
    assert all(seen.present.values()), seen.present  # autocast's weight cache would cut layers.1 off
