"""Objects between ranks: pickled with tensors as raw bytes, never through torch.save (which Lightning users
count to check what a run writes), and equal on arrival."""

from __future__ import annotations

import contextlib
import pickle

import numpy as np
import torch

import framework
from framework.io.pickling import dumps, loads


@contextlib.contextmanager
def counted_torch_saves():
    calls, original = [], torch.save

    def counting(*args, **kwargs):
        calls.append(args[1] if len(args) > 1 else kwargs.get("f"))
        return original(*args, **kwargs)

    torch.save = counting
    try:
        yield calls
    finally:
        torch.save = original


def test_tensors_of_every_kind_arrive_equal_without_torch_save():
    values = {
        "scalar": torch.tensor(7), "transposed": torch.arange(12.0).reshape(3, 4).t(), "empty": torch.empty(0, 3),
        "bf16": torch.tensor([1.5, -2.25], dtype=torch.bfloat16), "bool": torch.tensor([True, False]),
        "conj": torch.tensor([1 + 2j, 3 - 1j]).conj(), "grad": torch.ones(2, requires_grad=True) * 3,
        "param": torch.nn.Parameter(torch.ones(2)), "sparse": torch.eye(3).to_sparse(),
        "rng": torch.get_rng_state(), "nested": [(torch.tensor([1, 2]), {"x": np.arange(3)}), "text", 4.5],
    }
    with counted_torch_saves() as calls:
        back = loads(dumps(values))
    assert calls == []
    for name in ("scalar", "transposed", "empty", "bf16", "bool", "rng"):
        assert back[name].dtype == values[name].dtype and torch.equal(back[name], values[name]), name
    assert torch.equal(back["conj"], values["conj"].resolve_conj())
    assert back["grad"].requires_grad and back["grad"].grad_fn is None and torch.equal(back["grad"], values["grad"])
    assert type(back["param"]) is torch.nn.Parameter and back["param"].requires_grad
    assert back["sparse"].is_sparse and torch.equal(back["sparse"].to_dense(), torch.eye(3))
    assert torch.equal(back["nested"][0][0], torch.tensor([1, 2])) and back["nested"][1:] == ["text", 4.5]
    assert back["transposed"].is_contiguous()  # a copy of the values, not of the view's layout
    back["scalar"] += 1  # writable, its own memory
    assert values["scalar"].item() == 7


def test_bytes_from_plain_pickle_still_load():
    assert torch.equal(loads(pickle.dumps({"a": torch.ones(2)}))["a"], torch.ones(2))


def _exchange(runtime: framework.Runtime) -> tuple[list, dict, list]:
    rank = runtime.global_rank
    with counted_torch_saves() as calls:
        broadcast = runtime.broadcast({"step": torch.tensor(rank + 10), "rng": torch.get_rng_state()}, src=1)
        gathered = runtime.strategy.all_gather_object(torch.full((2,), float(rank), dtype=torch.bfloat16))
    return calls, {"step": broadcast["step"].item(), "rng": broadcast["rng"].dtype}, [t.tolist() for t in gathered]


def test_the_ranks_exchange_tensors_without_torch_save():
    results = framework.Runtime(accelerator="cpu", devices=2, strategy="ddp").run_in_ranks(_exchange)
    for calls, broadcast, gathered in results:
        assert calls == [] and broadcast == {"step": 11, "rng": torch.uint8} and gathered == [[0.0, 0.0], [1.0, 1.0]]
