"""HSDP: FSDPStrategy(sharding_strategy="HYBRID_SHARD") on a 2-D mesh shards within groups of ranks and replicates
across them; on 4 gloo ranks it trains as DDP, holds what the arithmetic says, and checkpoints into other layouts."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from framework.callbacks import ModelCheckpoint
from framework.errors import MisconfigurationError
from framework.strategies import FSDPStrategy
from framework.testing import spawn
from tests.strategies.test_sharded import Regressor, _Blocks, _MeasureState, _shuffled, fitted, quiet_trainer


def test_hybrid_sharding_on_2x2_ranks_trains_as_ddp():
    reference, _ = fitted("ddp", devices=4)
    weights, _ = fitted(FSDPStrategy(sharding_strategy="HYBRID_SHARD", device_mesh=(2, 2)), devices=4)
    for name, value in weights.items():
        torch.testing.assert_close(value, reference[name], rtol=1e-5, atol=1e-6, msg=name)


def _held_on_rank(rank: int, strategy: FSDPStrategy) -> tuple[int, int, int, tuple, tuple]:
    measure = _MeasureState()
    trainer = quiet_trainer(devices=4, strategy=strategy, max_steps=2, callbacks=[measure])
    trainer.fit(_Blocks(), DataLoader(TensorDataset(torch.randn(32, 64)), batch_size=4))
    mesh = trainer.strategy.mesh
    return measure.parameters, measure.gradients, measure.optimizer, tuple(mesh.shape), tuple(mesh.mesh_dim_names)


@pytest.mark.parametrize(("sharding", "theory"), [("HYBRID_SHARD", (2, 2, 4)), ("_HYBRID_SHARD_ZERO2", (4, 2, 4))])
def test_each_rank_holds_a_share_of_its_group_of_two(sharding, theory):
    """Ψ fp32 parameters with Adam, 4 ranks in 2 groups of 2: each rank holds what ZeRO on 2 ranks holds."""
    psi = sum(p.numel() for p in _Blocks().parameters())
    for *held, shape, names in spawn(4, _held_on_rank, FSDPStrategy(sharding_strategy=sharding, device_mesh=(2, 2)),
                                     timeout=120):
        assert (shape, names) == ((2, 2), ("replicate", "shard"))
        for measured, expected in zip(held, theory, strict=True):
            assert measured == pytest.approx(expected * psi, rel=0.10), (held, theory)


def _train(rank: int, strategy: FSDPStrategy, dirpath: str, steps: int, resume: bool):
    """Train with a checkpoint every 3 steps (mid-epoch), or resume from the last one; the whole weights."""
    torch.manual_seed(0)
    trainer = quiet_trainer(devices=4 if strategy.sharding_strategy == "HYBRID_SHARD" else 2, strategy=strategy,
                            max_steps=steps, enable_checkpointing=True,
                            callbacks=[ModelCheckpoint(dirpath=dirpath, save_last=True, every_n_train_steps=3)])
    trainer.fit(Regressor(), _shuffled(trainer.world_size), ckpt_path=f"{dirpath}/last.ckpt" if resume else None)
    state = trainer.strategy.full_module_state_dict(trainer.model)
    return state if rank == 0 else None


@pytest.mark.parametrize("direction", ["hybrid_to_zero3", "zero3_to_hybrid"])
def test_a_sharded_checkpoint_moves_between_hybrid_and_full_sharding(tmp_path, direction):
    hybrid, full = FSDPStrategy(sharding_strategy="HYBRID_SHARD", device_mesh=(2, 2)), FSDPStrategy()
    first, then = (hybrid, full) if direction == "hybrid_to_zero3" else (full, hybrid)
    ranks = {id(hybrid): 4, id(full): 2}
    uninterrupted = spawn(ranks[id(first)], _train, first, str(tmp_path / "all"), 12, False, timeout=120)[0]
    spawn(ranks[id(first)], _train, first, str(tmp_path / "half"), 6, False, timeout=120)
    resumed = spawn(ranks[id(then)], _train, then, str(tmp_path / "half"), 12, True, timeout=120)[0]
    for name, value in resumed.items():
        torch.testing.assert_close(value, uninterrupted[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize(("arguments", "match"), [
    ({"device_mesh": (2, 2)}, r"device_mesh=\(2, 2\).*hybrid sharding.*sharding_strategy='HYBRID_SHARD'"),
    ({"sharding_strategy": "HYBRID_SHARD", "device_mesh": (4,)}, r"device_mesh=\(4,\).*\(replicas, shard_size\)"),
    ({"sharding_strategy": "HYBRID_SHARD", "device_mesh": "2x2"}, r"device_mesh='2x2'"),
])
def test_bad_hybrid_arguments_name_the_argument_and_what_is_accepted(arguments, match):
    with pytest.raises(MisconfigurationError, match=match):
        FSDPStrategy(**arguments)


def _mesh_of_wrong_size(rank: int) -> None:
    quiet_trainer(devices=2, strategy=FSDPStrategy(sharding_strategy="HYBRID_SHARD", device_mesh=(2, 2)),
                  max_steps=1).fit(_Blocks(), DataLoader(TensorDataset(torch.randn(8, 64)), batch_size=4))


def test_a_mesh_that_does_not_fit_the_ranks_is_refused_with_its_sizes():
    with pytest.raises(MisconfigurationError, match=r"2 replicas x 2 ranks each make 4 ranks, but this run has 2"):
        spawn(2, _mesh_of_wrong_size)


def _default_mesh(rank: int) -> tuple:
    trainer = quiet_trainer(devices=2, strategy=FSDPStrategy(sharding_strategy="HYBRID_SHARD"), max_steps=1)
    trainer.fit(_Blocks(), DataLoader(TensorDataset(torch.randn(8, 64)), batch_size=4))
    return tuple(trainer.strategy.mesh.shape)


def test_by_default_a_group_is_one_node():
    assert spawn(2, _default_mesh) == [(1, 2), (1, 2)]
