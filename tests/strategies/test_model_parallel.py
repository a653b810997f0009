"""ModelParallelStrategy: the tutorial's GPT, split 2 (data parallel) x 2 (tensor parallel) on 4 gloo ranks, trains
as one process does, holds a quarter of its state per rank, and checkpoints into any other mesh."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import framework
from framework.callbacks import Callback
from framework.errors import MisconfigurationError
from framework.strategies import ModelParallelStrategy
from framework.testing import SavedActivations, spawn, state_bytes
from tests.io.planting import assert_every_member_refuses_a_payload

ROOT = Path(__file__).resolve().parents[2]


def _tutorial():
    name = "tutorial_10_tensor_parallel"  # registered, so the ranks' pickles of its classes resolve
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tutorials" / "10_tensor_parallel.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


tutorial = _tutorial()
VOCABULARY = 36  # a multiple of 4, so every rank's part of the embedding and the head is even
BATCH, STEPS, CLIP = 4, 6, 0.5


def gpt(**kwargs) -> nn.Module:
    torch.manual_seed(0)
    return tutorial.GPT(vocabulary=VOCABULARY, **kwargs)


def windows() -> tutorial.Windows:
    return tutorial.Windows(32)


def plain_pytorch(clip: float = CLIP) -> tuple[list[float], dict[str, torch.Tensor]]:
    """One process, the whole model, the doubled batch: the losses and the weights a hand-written loop gets."""
    model = gpt()
    optimizer = torch.optim.AdamW(model.parameters(), lr=model.hparams.lr, weight_decay=0.01)
    losses = []
    for step, (ids, targets) in enumerate(DataLoader(windows(), batch_size=2 * BATCH)):
        if step == STEPS:
            break
        loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), targets.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, model.state_dict()


class Record(Callback):
    """Each step's loss, and the state bytes at the points ZeRO's arithmetic speaks of (first batch)."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.held = {"parameters": -1, "gradients": -1, "optimizer": -1}

    def _take(self, kind: str, module: nn.Module, optimizer=None) -> None:
        if self.held[kind] < 0:
            self.held[kind] = state_bytes(module, optimizer)[kind]

    def on_before_backward(self, trainer, module, loss):
        self._take("parameters", module)

    def on_after_backward(self, trainer, module):
        self._take("gradients", module)

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch_idx == 0:
            self.activations.start()

    def on_train_start(self, trainer, module):
        self.activations = SavedActivations()
        self.computed_in: set[torch.dtype] = set()
        for layer in (module.blocks[0].up, module.head):  # a unit the Module made, and one the strategy made
            layer.register_forward_pre_hook(lambda layer, args: self.computed_in.add(layer.weight.dtype))

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self._take("optimizer", module, trainer.optimizers[0])  # after the first step: the state exists from then on
        if batch_idx == 0:
            self.activations.stop()
        self.losses.append(outputs["loss"].item())


def _trainer(strategy, devices: int, **kwargs) -> framework.Trainer:
    return framework.Trainer(accelerator="cpu", devices=devices, strategy=strategy, logger=False,
                             enable_progress_bar=False, enable_model_summary=False, **kwargs)


def _train_on_rank(rank: int, strategy: ModelParallelStrategy, precision: str = "32-true"):
    record = Record()
    trainer = _trainer(strategy, 4, max_steps=STEPS, gradient_clip_val=CLIP, precision=precision,
                       enable_checkpointing=False, callbacks=[record])
    trainer.fit(gpt(), DataLoader(windows(), batch_size=BATCH))
    weights = trainer.strategy.full_module_state_dict(trainer.model)
    mesh = trainer.strategy.device_mesh
    return (record.losses, record.held, weights if rank == 0 else None, tuple(mesh.mesh_dim_names), tuple(mesh.shape),
            record.computed_in, record.activations.peak)


def assert_same_weights(trained: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> None:
    assert trained.keys() == reference.keys()
    for name, value in trained.items():
        if name.endswith("key.bias"):
            # attention does not depend on the key bias (it adds the same to every score of a query): its gradient
            # is rounding noise, which AdamW scales up to full steps, different in any other order of the sums
            continue
        torch.testing.assert_close(value, reference[name], rtol=1e-4, atol=1e-5, msg=name)


def _split_four_ways(name: str) -> bool:
    """Whether the tutorial's plan splits this parameter over the tensor-parallel ranks (rowwise biases and norms are
    whole there)."""
    whole = ("norm" in name) or name.endswith(("out.bias", "down.bias"))
    return not whole


@pytest.fixture(scope="module")
def reference():
    return plain_pytorch()


def test_a_gpt_on_2x2_ranks_trains_as_one_process_and_each_rank_holds_a_quarter(reference):
    ranks = spawn(4, _train_on_rank, ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=2), timeout=120)
    losses, weights = reference
    for rank_losses, *_ in ranks:  # the two tensor-parallel ranks of a group compute the same loss
        assert len(rank_losses) == STEPS
    mean = [sum(pair) / 2 for pair in zip(ranks[0][0], ranks[2][0], strict=True)]  # ranks 0 and 2: the two groups
    torch.testing.assert_close(torch.tensor(mean), torch.tensor(losses), rtol=1e-5, atol=1e-5)
    assert_same_weights(ranks[0][2], weights)
    assert ranks[0][3:5] == (("data_parallel", "tensor_parallel"), (2, 2))
    assert ranks[0][5] == {torch.float32}

    model = gpt()
    theory = sum(p.numel() * 4 / (4 if _split_four_ways(n) else 2) for n, p in model.named_parameters())
    count = sum(1 for _ in model.parameters())
    whole = sum(p.numel() * 4 for p in model.parameters())
    assert theory / whole < 0.255  # what is left whole in a group is small
    for _, held, *_ in ranks:
        assert held["parameters"] == held["gradients"] == theory
        assert held["optimizer"] == 2 * theory + 4 * count  # AdamW's two moments, and a 4-byte step per parameter


@pytest.mark.parametrize(("precision", "gathered_in"), [("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float32)])
def test_mixed_precision_trains_close_to_fp32(reference, precision, gathered_in):
    """bf16-mixed gathers the parameters in bfloat16 (FSDP2's policy, in every unit); 16-mixed autocasts and scales
    the loss, its scaler checking the DTensor gradients for infinities."""
    ranks = spawn(4, _train_on_rank, ModelParallelStrategy(data_parallel_size=2), precision, timeout=120)
    losses, _ = reference
    mean = [sum(pair) / 2 for pair in zip(ranks[0][0], ranks[2][0], strict=True)]
    torch.testing.assert_close(torch.tensor(mean), torch.tensor(losses), rtol=0.02, atol=0.02)
    assert mean[-1] < mean[0] - 0.3
    assert all(rank[5] == {gathered_in} for rank in ranks)


# -- checkpoints ---

def _fit_and_save(rank: int, path: str, strategy, devices: int, steps: int, batch_size: int, resume: bool):
    trainer = _trainer(strategy, devices, max_steps=steps, enable_checkpointing=False)
    loader = DataLoader(windows(), batch_size=batch_size)
    trainer.fit(gpt(), loader, ckpt_path=path if resume else None)
    if not resume:
        trainer.save_checkpoint(path)
    weights = trainer.strategy.full_module_state_dict(trainer.model)
    return weights if rank == 0 else None


@pytest.mark.parametrize("resumed_on", ["1x2", "zero3"])
def test_a_sharded_checkpoint_of_2x2_ranks_resumes_on_another_mesh_as_if_uninterrupted(tmp_path, resumed_on):
    path = str(tmp_path / "half.ckpt")
    spawn(4, _fit_and_save, path, ModelParallelStrategy(data_parallel_size=2), 4, 3, BATCH, False, timeout=120)
    if resumed_on == "1x2":  # one group of two: the doubled batch on one data-parallel rank
        strategy = ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=2)
    else:
        strategy = framework.strategies.FSDPStrategy()
    batch = 2 * BATCH if resumed_on == "1x2" else BATCH
    resumed = spawn(2, _fit_and_save, path, strategy, 2, STEPS, batch, True, timeout=120)[0]
    _, uninterrupted = plain_pytorch(clip=float("inf"))
    assert_same_weights(resumed, uninterrupted)


def test_a_whole_file_checkpoint_of_2x2_ranks_resumes_on_2x2(tmp_path):
    path = str(tmp_path / "half.ckpt")
    strategy = ModelParallelStrategy(data_parallel_size=2, save_distributed_checkpoint=False)
    spawn(4, _fit_and_save, path, strategy, 4, 3, BATCH, False, timeout=120)
    assert (tmp_path / "half.ckpt").is_file()
    resumed = spawn(4, _fit_and_save, path, strategy, 4, STEPS, BATCH, True, timeout=120)[0]
    assert_same_weights(resumed, plain_pytorch(clip=float("inf"))[1])


def test_consolidate_makes_one_file_of_a_2x2_checkpoint_that_loads_into_the_whole_model(tmp_path):
    path = str(tmp_path / "run.ckpt")
    weights = spawn(4, _fit_and_save, path, ModelParallelStrategy(data_parallel_size=2), 4, 2, BATCH, False,
                    timeout=120)[0]
    finished = subprocess.run([sys.executable, "-m", "framework", "consolidate", path, str(tmp_path / "whole.ckpt")],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert finished.returncode == 0, finished.stderr
    model = tutorial.GPT.load_from_checkpoint(str(tmp_path / "whole.ckpt"))
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, weights[name], msg=name)
    assert_every_member_refuses_a_payload(tmp_path / "run.ckpt", tmp_path / "planted")  # the 2x2 layout


# -- the bare Runtime ---

def parallelize(module: nn.Module, mesh) -> nn.Module:
    """Fabric's form: the plan applied by the strategy's parallelize_fn in runtime.setup."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    plan = tutorial.tensor_parallel_plan()
    parallelize_module(module, mesh["tensor_parallel"], plan["model"])
    for block in module.blocks:
        parallelize_module(block, mesh["tensor_parallel"], plan["block"])
        fully_shard(block, mesh=mesh["data_parallel"])
    return module


def _runtime_loop(runtime: framework.Runtime) -> tuple[list[float], dict[str, torch.Tensor]]:
    model = gpt()
    optimizer = torch.optim.AdamW(model.parameters(), lr=model.hparams.lr, weight_decay=0.01)  # made before setup
    model, optimizer = runtime.setup(model, optimizer)
    losses = []
    for step, (ids, targets) in enumerate(runtime.setup_dataloaders(DataLoader(windows(), batch_size=BATCH))):
        if step == STEPS:
            break
        loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), targets.flatten())
        runtime.backward(loss)
        runtime.clip_gradients(model, optimizer, max_norm=CLIP)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(runtime.all_reduce(loss.detach())))
    weights = runtime.strategy.full_module_state_dict(model)
    return losses, weights if runtime.global_rank == 0 else None


def test_the_runtime_applies_parallelize_fn_and_trains_as_one_process(reference):
    runtime = framework.Runtime(accelerator="cpu", devices=4, strategy=ModelParallelStrategy(parallelize, 2))
    losses, weights = runtime.launch(_runtime_loop)  # rank 0's
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(reference[0]), rtol=1e-5, atol=1e-5)
    assert_same_weights(weights, reference[1])


# -- activation checkpointing, and what is refused ---

def test_activation_checkpointing_of_the_blocks_trains_to_the_same_weights_holding_less(reference):
    strategy = ModelParallelStrategy(data_parallel_size=2, activation_checkpointing_policy={tutorial.Block})
    checkpointed = spawn(4, _train_on_rank, strategy, timeout=120)
    assert_same_weights(checkpointed[0][2], reference[1])
    kept = spawn(4, _train_on_rank, ModelParallelStrategy(data_parallel_size=2), timeout=120)
    for with_recomputation, without in zip(checkpointed, kept, strict=True):  # per rank: the peak of the first batch
        assert with_recomputation[6] < 0.6 * without[6], (with_recomputation[6], without[6])


class _NotSplit(framework.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def training_step(self, batch, batch_idx):
        return self.layer(batch).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit_unsplit(rank: int) -> None:
    _trainer(ModelParallelStrategy(), 2, max_steps=1).fit(_NotSplit(), DataLoader(torch.randn(8, 4), batch_size=2))


def test_a_module_that_splits_nothing_over_tensor_parallel_ranks_is_told_how_to():
    with pytest.raises(MisconfigurationError, match=r"configure_model\(\)"):
        spawn(2, _fit_unsplit)


@pytest.mark.parametrize(("arguments", "match"), [
    ({"data_parallel_size": 0}, r"data_parallel_size=0.*'auto' or a positive int"),
    ({"tensor_parallel_size": "2"}, r"tensor_parallel_size='2'"),
    ({"save_distributed_checkpoint": "yes"}, r"save_distributed_checkpoint='yes'"),
])
def test_bad_arguments_name_the_argument_and_what_is_accepted(arguments, match):
    with pytest.raises(MisconfigurationError, match=match):
        ModelParallelStrategy(**arguments)


@pytest.mark.parametrize(("data", "tensor", "world", "per_node", "shape"), [
    ("auto", "auto", 4, 4, (1, 4)), ("auto", "auto", 4, 2, (2, 2)), (2, "auto", 4, 4, (2, 2)),
    ("auto", 1, 4, 4, (4, 1)),
])
def test_auto_sizes_make_a_mesh_of_every_rank(data, tensor, world, per_node, shape):
    from framework.strategies.model_parallel import mesh_shape

    assert mesh_shape(data, tensor, world, per_node) == shape


def test_sizes_that_do_not_fit_the_ranks_are_refused_naming_both():
    from framework.strategies.model_parallel import mesh_shape

    with pytest.raises(MisconfigurationError, match=r"data_parallel_size=3.*tensor_parallel_size='auto'.*4 ranks"):
        mesh_shape(3, "auto", 4, 4)


def test_the_strategy_is_registered_and_the_module_has_no_mesh_under_other_strategies():
    assert isinstance(framework.strategies.resolve_strategy("model_parallel"), ModelParallelStrategy)
    module = gpt()
    assert module.device_mesh is None
    trainer = framework.Trainer(accelerator="cpu", devices=1, logger=False)
    module.trainer = trainer
    assert module.device_mesh is None
