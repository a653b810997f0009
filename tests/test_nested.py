"""move_to_device on every container a batch may come in, and batches of those forms through the Trainer.

Moving to ``cpu`` is an identity for CPU tensors, so the structural tests also move to
the ``meta`` device: every tensor that was visited comes back on ``meta``, every one
that was missed stays on ``cpu``.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, defaultdict, namedtuple
from typing import NamedTuple

import pytest
import torch
from torch import nn

from framework.nested import move_to_device
from tests.helpers import Regressor, quiet_trainer, regression_data

CPU = torch.device("cpu")
META = torch.device("meta")

Pair = namedtuple("Pair", ["x", "y"])


class TypedBatch(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor


@dataclasses.dataclass
class Sample:
    x: torch.Tensor
    label: str
    extra: list
    cached: torch.Tensor = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.cached = torch.zeros(1)  # replaced below by a tensor that must be moved


@dataclasses.dataclass(frozen=True)
class FrozenSample:
    x: torch.Tensor
    cached: torch.Tensor = dataclasses.field(init=False, default=None)


class Movable:
    """Not a tensor, not a container: moved by its own ``.to(device)``."""

    def __init__(self, value: torch.Tensor, seen: list) -> None:
        self.value = value
        self.seen = seen

    def to(self, device):
        self.seen.append(device)
        return Movable(self.value.to(device), self.seen)


def on(device: torch.device, *tensors: torch.Tensor) -> bool:
    return all(t.device.type == device.type for t in tensors)


# -- move_to_device, container by container ------------------------------------------------------------------

def test_plain_tensor_keeps_values_and_dtype():
    t = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    moved = move_to_device(t, CPU)
    assert moved.dtype == torch.float64
    torch.testing.assert_close(moved, t)
    assert move_to_device(t, META).device.type == "meta"
    assert move_to_device(t, META).dtype == torch.float64


def test_dict_list_tuple_nesting_moves_every_tensor_and_keeps_leaves():
    batch = {
        "x": torch.ones(2, dtype=torch.float64),
        "ids": [torch.tensor([1, 2]), ("name", 7, torch.zeros(3))],
        "text": "hello",
        "count": 3,
        "none": None,
    }
    moved = move_to_device(batch, META)
    assert type(moved) is dict and set(moved) == set(batch)
    assert on(META, moved["x"], moved["ids"][0], moved["ids"][1][2])
    assert moved["x"].dtype == torch.float64
    assert moved["ids"][0].dtype == torch.int64
    assert type(moved["ids"]) is list and type(moved["ids"][1]) is tuple
    assert moved["ids"][1][0] == "name" and moved["ids"][1][1] == 7
    assert moved["text"] == "hello" and moved["count"] == 3 and moved["none"] is None
    # the input is not modified in place
    assert on(CPU, batch["x"], batch["ids"][0], batch["ids"][1][2])


def test_values_unchanged_on_cpu():
    batch = {"x": torch.randn(3, 2, dtype=torch.float64), "y": [torch.arange(3), "s", 5]}
    moved = move_to_device(batch, CPU)
    torch.testing.assert_close(moved["x"], batch["x"])
    assert moved["x"].dtype == torch.float64
    torch.testing.assert_close(moved["y"][0], batch["y"][0])
    assert moved["y"][1:] == ["s", 5]


@pytest.mark.parametrize("cls", [Pair, TypedBatch], ids=["namedtuple", "typing.NamedTuple"])
def test_namedtuple_stays_the_same_namedtuple(cls):
    batch = cls(x=torch.ones(2, dtype=torch.float64), y=torch.zeros(2))
    moved = move_to_device(batch, META)
    assert type(moved) is cls
    assert moved._fields == ("x", "y")
    assert on(META, moved.x, moved.y)
    assert moved.x.dtype == torch.float64
    same = move_to_device(batch, CPU)
    assert type(same) is cls
    torch.testing.assert_close(same.x, batch.x)


def test_namedtuple_with_non_tensor_fields():
    Item = namedtuple("Item", ["x", "name", "n", "nested"])
    batch = Item(torch.ones(1), "a", 4, {"t": torch.zeros(1)})
    moved = move_to_device(batch, META)
    assert type(moved) is Item
    assert moved.name == "a" and moved.n == 4
    assert on(META, moved.x, moved.nested["t"])


def test_ordered_dict_stays_ordered_dict_in_order():
    batch = OrderedDict([("b", torch.ones(1)), ("a", torch.zeros(1)), ("c", "leaf")])
    moved = move_to_device(batch, META)
    assert type(moved) is OrderedDict
    assert list(moved) == ["b", "a", "c"]
    assert on(META, moved["b"], moved["a"])
    assert moved["c"] == "leaf"


def test_defaultdict_keeps_its_type_and_factory():
    batch = defaultdict(list, {"x": torch.ones(1)})
    moved = move_to_device(batch, META)
    assert type(moved) is defaultdict
    assert moved.default_factory is list
    assert on(META, moved["x"])


def test_list_and_tuple_subclasses_keep_their_type():
    class Batch(list):
        pass

    batch = Batch([torch.ones(1), "s"])
    moved = move_to_device(batch, META)
    assert type(moved) is Batch
    assert on(META, moved[0]) and moved[1] == "s"


def test_dataclass_including_init_false_field():
    sample = Sample(x=torch.ones(2, dtype=torch.float64), label="cat", extra=[torch.zeros(1), 3])
    sample.cached = torch.full((2,), 5.0)
    moved = move_to_device(sample, META)
    assert type(moved) is Sample
    assert moved is not sample
    assert on(META, moved.x, moved.extra[0], moved.cached)
    assert moved.x.dtype == torch.float64
    assert moved.label == "cat" and moved.extra[1] == 3
    # the init=False field keeps the value it had, not the one __post_init__ computes
    same = move_to_device(sample, CPU)
    torch.testing.assert_close(same.cached, torch.full((2,), 5.0))
    torch.testing.assert_close(same.x, sample.x)
    # the original is untouched
    assert on(CPU, sample.x, sample.cached)


def test_frozen_dataclass_with_init_false_field():
    sample = FrozenSample(x=torch.ones(1))
    object.__setattr__(sample, "cached", torch.zeros(1))
    moved = move_to_device(sample, META)
    assert type(moved) is FrozenSample
    assert on(META, moved.x, moved.cached)


def test_object_with_to_method_is_moved_by_it():
    seen: list = []
    obj = Movable(torch.ones(2), seen)
    moved = move_to_device({"obj": obj, "objs": [obj]}, META)
    assert seen == [META, META]
    assert isinstance(moved["obj"], Movable) and on(META, moved["obj"].value, moved["objs"][0].value)


def test_non_tensor_leaves_come_back_unchanged():
    leaves = ["text", 3, 2.5, None, True, b"bytes"]
    for leaf in leaves:
        assert move_to_device(leaf, META) == leaf
    marker = object()
    assert move_to_device(marker, META) is marker
    assert move_to_device(("a", 1, marker), META) == ("a", 1, marker)


def test_module_in_batch_uses_its_to():
    layer = nn.Linear(2, 2).double()
    moved = move_to_device({"layer": layer}, CPU)
    assert moved["layer"] is layer  # nn.Module.to is in place and returns self
    assert layer.weight.dtype == torch.float64


# -- through the Trainer ---------------------------------------------------------------------------------------

def _batches(batch_size: int = 8, n: int = 32):
    data = regression_data(n)
    return [(data.tensors[0][i:i + batch_size], data.tensors[1][i:i + batch_size]) for i in range(0, n, batch_size)]


def _reference_weights(batches, lr: float, epochs: int) -> dict[str, torch.Tensor]:
    model = Regressor(lr=lr)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(epochs):
        for x, y in batches:
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return model.state_dict()


class DictRegressor(Regressor):
    def __init__(self) -> None:
        super().__init__(lr=0.05)
        self.batch_types: list[type] = []

    def training_step(self, batch, batch_idx):
        self.batch_types.append(type(batch))
        return nn.functional.mse_loss(self(batch["x"]), batch["y"])


class NamedTupleRegressor(Regressor):
    def __init__(self) -> None:
        super().__init__(lr=0.05)
        self.batch_types: list[type] = []

    def training_step(self, batch, batch_idx):
        self.batch_types.append(type(batch))
        return nn.functional.mse_loss(self(batch.x), batch.y)


def test_trainer_dict_batches_from_a_plain_list():
    pairs = _batches()
    batches = [{"x": x, "y": y} for x, y in pairs]
    model = DictRegressor()
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(model, batches)
    assert trainer.global_step == 2 * len(batches)
    assert model.batch_types == [dict] * (2 * len(batches))
    expected = _reference_weights(pairs, lr=0.05, epochs=2)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, expected[name])


def test_trainer_namedtuple_batches_from_a_plain_list():
    pairs = _batches()
    batches = [TypedBatch(x, y) for x, y in pairs]
    model = NamedTupleRegressor()
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(model, batches)
    assert trainer.global_step == 2 * len(batches)
    assert model.batch_types == [TypedBatch] * (2 * len(batches))
    expected = _reference_weights(pairs, lr=0.05, epochs=2)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, expected[name])


def test_trainer_float64_batch_stays_float64():
    class Float64Regressor(Regressor):
        def __init__(self) -> None:
            super().__init__()
            self.double()
            self.dtypes: list[torch.dtype] = []

        def training_step(self, batch, batch_idx):
            self.dtypes.append(batch["x"].dtype)
            return nn.functional.mse_loss(self(batch["x"]), batch["y"])

    batches = [{"x": x.double(), "y": y.double()} for x, y in _batches()]
    model = Float64Regressor()
    quiet_trainer(max_epochs=1).fit(model, batches)
    assert model.dtypes == [torch.float64] * len(batches)
    assert model.net.weight.dtype == torch.float64
