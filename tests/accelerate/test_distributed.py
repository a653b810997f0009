"""The Accelerator on two real gloo ranks: it trains as the Runtime does, syncs gradients only where Accelerate
does, gathers evaluation results exactly, resumes exactly, and runs FSDP on CPU."""

from __future__ import annotations

import os

import torch
from torch.utils.data import DataLoader, TensorDataset

from framework.accelerate import Accelerator, DataLoaderConfiguration
from framework.runtime.wrappers import forward_module
from framework.testing import spawn
from tests.accelerate.loops import (
    accelerate_loop_on_rank,
    data,
    model_and_optimizer,
    plain_loop_in_accelerates_order,
    runtime_loop_on_rank,
)
from tests.accelerate.resumable import train_on_rank


def _assert_same(weights: dict, reference: dict, exact: bool = False) -> None:
    for name, value in weights.items():
        tolerance = {"rtol": 0, "atol": 0} if exact else {"rtol": 1e-5, "atol": 1e-6}
        torch.testing.assert_close(value, reference[name], **tolerance, msg=name)


def test_two_ranks_train_as_one_plain_process_in_accelerates_order_with_accumulation_and_shuffling():
    accelerated = spawn(2, accelerate_loop_on_rank, 2, True)
    reference = plain_loop_in_accelerates_order(accumulate=2)
    unshuffled = spawn(2, accelerate_loop_on_rank, 2, False)
    runtime = spawn(2, runtime_loop_on_rank, 2, False)  # unshuffled, the Runtime's ranks train the same
    for rank in (0, 1):
        _assert_same(accelerated[rank]["weights"], reference["weights"])
        _assert_same(unshuffled[rank]["weights"], runtime[0]["weights"])
        assert accelerated[rank]["batches"] == 8  # 16 batches a pass, dealt out in turn
        assert accelerated[rank]["syncs"] == [False, True] * 8
        assert accelerated[rank]["distributed_type"] == "MULTI_CPU"


def _count_all_reduces(rank: int) -> dict:
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    model, optimizer = model_and_optimizer()
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=3)
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(data(40), batch_size=4))
    reduced = [0]

    def counting(state, bucket):
        reduced[0] += 1
        return allreduce_hook(state, bucket)

    forward_module(model).register_comm_hook(None, counting)
    syncs = 0
    for x, y in loader:  # 5 batches on each rank: windows of 3, then the pass's last batch syncs
        with accelerator.accumulate(model):
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            syncs += accelerator.sync_gradients
            optimizer.step()
            optimizer.zero_grad()
    return {"all_reduces": reduced[0], "syncs": syncs}


def test_gradients_are_all_reduced_only_on_the_batches_that_sync():
    for counts in spawn(2, _count_all_reduces):
        assert counts == {"all_reduces": 2, "syncs": 2}


def _evaluate(rank: int) -> dict:
    accelerator = Accelerator(cpu=True)
    values = torch.arange(101.0)
    loader = accelerator.prepare(DataLoader(TensorDataset(values), batch_size=8))
    tensors, objects, sizes = [], [], []
    for (batch,) in loader:
        sizes.append(len(batch))
        tensors.append(accelerator.gather_for_metrics(batch))
        objects.extend(accelerator.gather_for_metrics([f"sample {int(v)}" for v in batch]))
    return {"tensors": torch.cat(tensors), "objects": objects, "sizes": sizes,
            "gather": accelerator.gather(torch.tensor(float(rank))),
            "padded": accelerator.pad_across_processes(torch.ones(rank + 1), pad_index=-1),
            "reduced": accelerator.reduce(torch.tensor(rank + 1.0), reduction="mean")}


def test_gather_for_metrics_sees_each_of_101_samples_once_in_order():
    for seen in spawn(2, _evaluate):
        assert torch.equal(seen["tensors"], torch.arange(101.0))
        assert seen["objects"] == [f"sample {index}" for index in range(101)]
        assert seen["sizes"] == [8] * 7  # the last round completed so both ranks run 7 full batches
        assert torch.equal(seen["gather"], torch.tensor([0.0, 1.0]))
        assert seen["reduced"].item() == 1.5
    assert spawn(2, _evaluate)[0]["padded"].tolist() == [1.0, -1.0]


def test_two_ranks_resume_from_save_state_as_if_never_stopped(tmp_path):
    folder = str(tmp_path / "state")  # each rank draws its own masks while loading: each resumes its own draws
    whole = spawn(2, train_on_rank, str(tmp_path / "unused"), False, None, True)
    saved = spawn(2, train_on_rank, folder, True, None, True)
    assert {"random_states_0.pkl", "random_states_1.pkl", "model.safetensors"} <= set(saved[0]["saved"])
    resumed = spawn(2, train_on_rank, folder, False, "position", True)
    for rank in (0, 1):
        _assert_same(resumed[rank]["weights"], whole[rank]["weights"], exact=True)


def test_fsdp_from_the_launchers_settings_trains_saves_and_resumes_on_cpu_ranks(tmp_path, monkeypatch):
    ddp = spawn(2, accelerate_loop_on_rank, 2, True)
    for name, value in {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_RESHARD_AFTER_FORWARD": "true",
                        "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP", "FSDP_TRANSFORMER_CLS_TO_WRAP": "Linear",
                        "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT"}.items():
        monkeypatch.setenv(name, value)
    sharded = spawn(2, accelerate_loop_on_rank, 2, True)
    assert sharded[0]["distributed_type"] == "FSDP"
    _assert_same(sharded[0]["weights"], ddp[0]["weights"])
    folder = str(tmp_path / "state")
    whole = spawn(2, train_on_rank, str(tmp_path / "unused"), False, None)
    saved = spawn(2, train_on_rank, folder, True, None)
    assert {"pytorch_model_fsdp_0", "optimizer_0"} <= set(saved[0]["saved"])
    assert os.path.isdir(os.path.join(folder, "pytorch_model_fsdp_0"))
    resumed = spawn(2, train_on_rank, folder, False, "position")
    _assert_same(resumed[0]["weights"], whole[0]["weights"])


def _passes(rank: int, seedable: bool) -> dict:
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=seedable))
    dataset = TensorDataset(torch.arange(16))
    torch.manual_seed(0)
    loader = accelerator.prepare(DataLoader(dataset, batch_size=2, shuffle=True))
    first, second = ([batch.tolist() for (batch,) in loader] for _ in range(2))
    torch.manual_seed(0)
    later = accelerator.prepare(DataLoader(dataset, batch_size=2, shuffle=True))
    later.set_epoch(1)
    return {"first": first, "second": second, "set_epoch_1": [batch.tolist() for (batch,) in later]}


# Recorded from Accelerate 1.15 on two CPU ranks (ACCELERATE_USE_CPU=1 torchrun): set_seed(3), a Linear(3, 3) built,
# DataLoader(TensorDataset(torch.arange(20)), batch_size=3, shuffle=True) prepared, two passes; rank 0's, rank 1's.
_ACCELERATE_TWO_RANK_PASSES = [
    [[[2, 5, 17], [13, 18, 14], [10, 12, 19], [9, 3, 2]], [[12, 9, 5], [8, 11, 6], [7, 0, 19], [15, 10, 12]]],
    [[[7, 6, 8], [1, 16, 0], [15, 4, 11], [5, 17, 7]], [[2, 14, 4], [13, 18, 16], [1, 3, 17], [9, 5, 2]]],
]


def _two_passes_as_accelerate_draws_them(rank: int) -> list:
    from framework.accelerate.utils import set_seed

    set_seed(3)
    accelerator = Accelerator(cpu=True)
    torch.nn.Linear(3, 3)
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(20)), batch_size=3, shuffle=True))
    return [[batch.tolist() for (batch,) in loader] for _ in range(2)]


def test_each_pass_is_shuffled_anew_the_same_way_on_every_rank_as_accelerate_shuffles():
    assert spawn(2, _two_passes_as_accelerate_draws_them) == _ACCELERATE_TWO_RANK_PASSES
    for seedable in (False, True):
        ranks = spawn(2, _passes, seedable)
        for key in ("first", "second"):
            seen = sorted(index for rank in ranks for batch in rank[key] for index in batch)
            assert seen == list(range(16)), key  # each sample on one rank, once
        assert ranks[0]["first"] != ranks[0]["second"]
        # Accelerate's seedable sampler: set_epoch chooses the order; its default generator just moves on
        assert all((rank["set_epoch_1"] == rank["second"]) == seedable for rank in ranks)
