"""What Accelerate scripts do across processes, on two gloo ranks: the free collectives and state objects, a
prepared model's own ``no_sync``, DDP communication hooks, local SGD, per-rank profiles and logs, the launchers."""

from __future__ import annotations

import json
import logging
import os

import torch

from framework.accelerate import Accelerator, debug_launcher
from framework.accelerate.local_sgd import LocalSGD
from framework.accelerate.logging import get_logger
from framework.accelerate.state import AcceleratorState, PartialState
from framework.accelerate.utils import (
    DDPCommunicationHookType,
    DistributedDataParallelKwargs,
    ProfileKwargs,
    broadcast,
    broadcast_object_list,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
    set_seed,
    synchronize_rng_states,
)
from framework.errors import MisconfigurationError
from framework.testing import spawn


def _collectives(rank: int) -> dict:
    state = PartialState()  # no Accelerator: it joins the ranks by itself
    with state.split_between_processes(["a", "b", "c"], apply_padding=True) as mine:
        shared = mine
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = get_logger(f"test_processes_{rank}", log_level="INFO")
    logger.logger.addHandler(handler)
    logger.info("once")
    logger.info("each", main_process_only=False)
    listed = broadcast_object_list([f"from {rank}", rank])
    torch.manual_seed(rank)
    synchronize_rng_states(["torch"])
    draw = torch.rand(1).item()
    set_seed(5, device_specific=True)
    specific = torch.rand(1).item()
    return {"processes": state.num_processes, "shared": shared, "records": records,
            "gathered": gather(torch.tensor([rank, rank])).tolist(), "objects": gather_object([f"r{rank}"]),
            "broadcast": broadcast(torch.tensor([rank + 1.0])).tolist(), "listed": listed,
            "reduced": reduce(torch.tensor([rank + 1.0]), reduction="sum").tolist(),
            "padded": pad_across_processes(torch.ones(rank + 1), pad_index=-1).tolist(), "draw": draw,
            "specific": specific}


def test_the_free_collectives_and_partial_state_work_without_an_accelerator():
    first, second = spawn(2, _collectives)
    assert first["processes"] == second["processes"] == 2
    assert (first["shared"], second["shared"]) == (["a", "b"], ["c", "c"])
    assert (first["records"], second["records"]) == (["once", "each"], ["each"])
    assert first["gathered"] == second["gathered"] == [0, 0, 1, 1]
    assert first["objects"] == second["objects"] == ["r0", "r1"]
    assert first["broadcast"] == second["broadcast"] == [1.0] and second["listed"] == ["from 0", 0]
    assert first["reduced"] == [3.0] and (first["padded"], second["padded"]) == ([1.0, -1.0], [1.0, 1.0])
    assert first["draw"] == second["draw"]  # rank 0's generator state everywhere
    assert first["specific"] != second["specific"]  # seeded with 5 + the process index


def _process_count(rank: int) -> tuple[int, int]:
    return PartialState().num_processes, AcceleratorState().num_processes if _has_accelerator() else -1


def _has_accelerator() -> bool:
    try:
        AcceleratorState()
    except MisconfigurationError:
        return False
    return True


def test_ranks_forked_from_a_process_that_had_its_own_state_join_their_own_ranks():
    # A notebook or a test that made a PartialState and an Accelerator on its one process, then starts ranks:
    # forked, they inherit that state, which must not stand for theirs.
    parent = PartialState()
    accelerator = Accelerator(cpu=True)
    assert parent.num_processes == accelerator.num_processes == 1
    assert spawn(2, _process_count) == [(2, -1), (2, -1)]  # no Accelerator made on the ranks
    assert PartialState().num_processes == 1 and AcceleratorState().num_processes == 1  # the parent's, as before


def _grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [parameter.grad.clone() for parameter in model.parameters()]


def _local_batch(rank: int) -> torch.Tensor:
    return torch.arange(8.0).reshape(2, 4) * (rank + 1) / 7


def _no_sync_and_hooks(rank: int, hook: str) -> dict:
    handlers = [DistributedDataParallelKwargs(comm_hook=DDPCommunicationHookType(hook))] if hook != "no" else []
    accelerator = Accelerator(cpu=True, kwargs_handlers=handlers)
    torch.manual_seed(0)
    model = accelerator.prepare(torch.nn.Linear(4, 3))
    x = _local_batch(rank)
    with model.no_sync():  # the prepared model's own, as LocalSGD and scripts call it
        accelerator.backward(model(x).pow(2).sum())
    local = _grads(model)
    model.zero_grad()
    accelerator.backward(model(x).pow(2).sum())
    return {"local": local, "synced": _grads(model), "weights": [p.detach().clone() for p in model.parameters()]}


def _reference_grads(rank: int) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    model(_local_batch(rank)).pow(2).sum().backward()
    return _grads(model)


def test_a_prepared_models_own_no_sync_keeps_gradients_local_and_fp16_hooks_compress_the_reduction():
    plain = spawn(2, _no_sync_and_hooks, "no")
    own = [_reference_grads(rank) for rank in (0, 1)]
    for rank in (0, 1):
        for local, expected in zip(plain[rank]["local"], own[rank]):
            torch.testing.assert_close(local, expected)
        for synced, first, second in zip(plain[rank]["synced"], *own):
            torch.testing.assert_close(synced, (first + second) / 2)
    compressed = spawn(2, _no_sync_and_hooks, "fp16")
    for synced, first, second in zip(compressed[0]["synced"], *own):
        halves = (first.half() / 2).float() + (second.half() / 2).float()  # each rank's share in fp16, summed
        assert torch.equal(synced, halves.half().float())
    assert any(not torch.equal(a, b) for a, b in zip(compressed[0]["synced"], plain[0]["synced"]))


def _local_sgd(rank: int) -> list[list[torch.Tensor]]:
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    seen = []
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=2) as local_sgd:
        for step in range(3):
            accelerator.backward(model(_local_batch(rank) + step).pow(2).mean())
            optimizer.step()
            optimizer.zero_grad()
            local_sgd.step()
            seen.append([parameter.detach().clone() for parameter in model.parameters()])
    seen.append([parameter.detach().clone() for parameter in model.parameters()])
    return seen


def test_local_sgd_steps_on_local_gradients_and_averages_the_weights_every_k_steps():
    first, second = spawn(2, _local_sgd)
    torch.manual_seed(0)
    models = [torch.nn.Linear(4, 1) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    optimizers = [torch.optim.SGD(model.parameters(), lr=0.1) for model in models]
    for step in range(3):
        for rank, (model, optimizer) in enumerate(zip(models, optimizers)):
            model(_local_batch(rank) + step).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        if step == 1:  # every local_sgd_steps=2 steps: the mean of both
            with torch.no_grad():
                for a, b in zip(models[0].parameters(), models[1].parameters()):
                    a.copy_((a + b) / 2)
                    b.copy_(a)
        for rank, seen in enumerate((first, second)):
            for ours, reference in zip(seen[step], models[rank].parameters()):
                torch.testing.assert_close(ours, reference.detach())
    assert not torch.equal(first[2][0], second[2][0])  # step 3 was local
    for a, b in zip(first[3], second[3]):
        assert torch.equal(a, b)  # leaving the block averages once more


def _profiled(rank: int, folder: str) -> None:
    accelerator = Accelerator(cpu=True, kwargs_handlers=[ProfileKwargs(activities=["cpu"], output_trace_dir=folder)])
    model = accelerator.prepare(torch.nn.Linear(4, 4))
    with accelerator.profile():
        accelerator.backward(model(torch.ones(2, 4)).sum())


def test_each_process_writes_its_own_profile(tmp_path):
    spawn(2, _profiled, str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["profile_0.json", "profile_1.json"]
    assert all("traceEvents" in json.loads((tmp_path / name).read_text()) for name in os.listdir(tmp_path))


def _launched(folder: str) -> None:
    accelerator = Accelerator()
    total = accelerator.reduce(torch.tensor([accelerator.process_index + 1.0]), reduction="sum")
    with open(os.path.join(folder, f"rank{accelerator.process_index}.json"), "w") as file:
        json.dump({"total": total.item(), "type": accelerator.distributed_type.value,
                   "device": str(accelerator.device)}, file)


def test_debug_launcher_runs_the_function_on_two_cpu_processes(tmp_path):
    debug_launcher(_launched, (str(tmp_path),))
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert results == [{"total": 3.0, "type": "MULTI_CPU", "device": "cpu"}] * 2
