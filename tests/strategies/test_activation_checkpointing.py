"""Activation checkpointing on the FSDP strategies: the same training, fewer bytes held for backward, as counted
by ``framework.testing.SavedActivations`` and checked against the arithmetic of a stack of blocks."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import framework
from framework.callbacks import Callback
from framework.strategies import FSDPStrategy
from framework.strategies.fsdp_policy import apply_checkpointing
from framework.testing import SavedActivations, spawn
from tests.strategies.test_sharded import CompiledRegressor, fitted, quiet_trainer, regression_data

BLOCKS, WIDTH, BATCH = 4, 16, 8
UNIT = BATCH * WIDTH * 4  # bytes of one fp32 activation of width WIDTH for one batch


class Block(nn.Module):
    """Linear to 4×width, ReLU, Linear back, ReLU: it keeps its input, the wide ReLU's output (4 units) and its
    own output (1 unit) for backward; checkpointed, only its input."""

    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.down(torch.relu(self.up(x))))


def stack(blocks: int = BLOCKS) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[Block() for _ in range(blocks)])


def expected_peak(blocks: int, checkpointed: bool) -> int:
    """Peak bytes held for backward by ``stack(blocks)`` and an MSE loss (which keeps the output and the target).

    Without checkpointing all is held at the end of forward: the data, each block's wide ReLU
    output and own output, and the target. With each block checkpointed the blocks' inputs and the
    target are held, and once the loss's backward has freed the output, backward recomputes the
    last block (its wide output and a new copy of its output).
    """
    if not checkpointed:
        return (1 + 5 * blocks + 1) * UNIT
    return (blocks + 1 + 5) * UNIT


def peak_of_one_step(model: nn.Module) -> int:
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(BATCH, WIDTH, generator=generator), torch.randn(BATCH, WIDTH, generator=generator)
    with SavedActivations() as saved:
        nn.functional.mse_loss(model(x), y).backward()
    assert saved.current == 2 * UNIT  # afterwards only x and y, which the caller holds, are left
    return saved.peak


def is_block(module: nn.Module) -> bool:
    return isinstance(module, Block)


# -- the measurement and the policy, in one process ---

@pytest.mark.parametrize("blocks", [2, 6])
def test_saved_activations_follow_the_arithmetic_with_and_without_checkpointing(blocks):
    plain, checkpointed = stack(blocks), stack(blocks)
    apply_checkpointing(checkpointed, {Block})
    assert peak_of_one_step(plain) == expected_peak(blocks, checkpointed=False)
    assert peak_of_one_step(checkpointed) == expected_peak(blocks, checkpointed=True)
    for mine, reference in zip(checkpointed.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, reference.grad, rtol=0, atol=0)


def test_parameters_and_tensors_freed_early_do_not_count():
    weight = nn.Parameter(torch.randn(WIDTH, WIDTH))
    x = torch.randn(BATCH, WIDTH)
    with SavedActivations() as saved:
        (x @ weight).exp().sum().backward()  # keeps x and exp's output; the weight is a parameter
    assert saved.peak == 2 * UNIT and saved.current == UNIT  # exp's output was freed in backward; x is held here
    with SavedActivations() as saved:
        with torch.no_grad():
            (x @ weight).exp()
    assert saved.peak == 0


def test_a_module_inside_a_checkpointed_one_is_not_checkpointed_again():
    model = stack(2)
    names = [name for name, _ in model.named_parameters()]
    chosen = apply_checkpointing(model, {Block, nn.Linear})
    assert chosen == list(model)  # the Linears inside the Blocks are recomputed with them
    assert apply_checkpointing(model, is_block) == list(model)  # a second time changes nothing
    assert [name for name, _ in model.named_parameters()] == names
    assert peak_of_one_step(model) == expected_peak(2, checkpointed=True)
    assert apply_checkpointing(model, None) == []


# -- ZeRO-3 on two gloo ranks ---

class Stack(framework.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = stack()

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


class PeakActivations(Callback):
    """The largest peak of bytes held for backward over the training batches."""

    def __init__(self) -> None:
        self.saved, self.peak = SavedActivations(), 0

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.saved.start()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.saved.stop()
        self.peak = max(self.peak, self.saved.peak)


def train_on_rank(rank: int, policy) -> tuple[dict[str, torch.Tensor], int]:
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(6 * BATCH, WIDTH, generator=generator),
                         torch.randn(6 * BATCH, WIDTH, generator=generator))
    peak = PeakActivations()
    strategy = FSDPStrategy(activation_checkpointing_policy=policy)
    trainer = framework.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_steps=3, logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                callbacks=[peak])
    model = Stack()
    trainer.fit(model, DataLoader(data, batch_size=BATCH))
    return {name: value.full_tensor() for name, value in model.state_dict().items()}, peak.peak


@pytest.fixture(scope="module")
def without_checkpointing():
    return spawn(2, train_on_rank, None)


@pytest.mark.parametrize("policy", [{Block}, is_block], ids=["class set", "callable"])
def test_zero3_with_checkpointing_trains_the_same_weights_and_holds_the_blocks_inputs_only(policy,
                                                                                          without_checkpointing):
    for (weights, peak), (reference, reference_peak) in zip(spawn(2, train_on_rank, policy), without_checkpointing,
                                                            strict=True):
        assert reference_peak == expected_peak(BLOCKS, checkpointed=False)
        assert peak == expected_peak(BLOCKS, checkpointed=True)  # 10 units instead of 22 with 4 blocks
        assert weights.keys() == reference.keys()
        for name, value in weights.items():
            torch.testing.assert_close(value, reference[name], rtol=1e-6, atol=1e-7, msg=name)


def test_compiled_steps_with_checkpointed_layers_train_as_eager_ddp():
    """The recomputation runs inside the compiled graph: AOTAutograd's backward gets the same activations."""
    reference, _ = fitted("ddp")
    torch.manual_seed(0)
    model = CompiledRegressor()
    trainer = quiet_trainer(devices=2, strategy=FSDPStrategy(activation_checkpointing_policy={nn.Linear}),
                            max_epochs=2, gradient_clip_val=0.05, accumulate_grad_batches=2,
                            compile={"backend": "aot_eager"})
    trainer.fit(model, DataLoader(regression_data(), batch_size=4), DataLoader(regression_data(9), batch_size=4))
    assert trainer.callback_metrics["compiled_training"] == 1
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, reference[name], rtol=1e-5, atol=1e-6, msg=name)


def test_a_copy_or_a_pickle_of_a_checkpointed_module_recomputes_its_own_layers():
    import copy
    import pickle

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    apply_checkpointing(net, {nn.Linear})
    x = torch.randn(8, 4)
    for twin in (copy.deepcopy(net), pickle.loads(pickle.dumps(net))):
        with torch.no_grad():
            twin[0].weight.mul_(2)  # changed in the twin only: its forward must use its own weights
        assert [name for name, _ in twin.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
        unchecked = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
        unchecked.load_state_dict(twin.state_dict())
        torch.testing.assert_close(twin(x), unchecked(x))
