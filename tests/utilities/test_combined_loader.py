"""``CombinedLoader``: Lightning's four modes, batches in the shape the loaders were given in, and the Trainer
training on one (every loader sharded by rank, reshuffled each epoch) and evaluating a sequential one."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

import framework
from framework.errors import MisconfigurationError
from framework.testing import spawn
from framework.utilities import CombinedLoader
from tests.helpers import quiet_trainer


def loaders():
    return {"a": DataLoader(range(6), batch_size=4), "b": DataLoader(range(15), batch_size=5)}


def values(batches):
    return [{key: None if value is None else value.tolist() for key, value in batch.items()} for batch in batches]


def test_each_mode_combines_as_lightning_does():
    assert values(CombinedLoader(loaders(), "min_size")) == [
        {"a": [0, 1, 2, 3], "b": [0, 1, 2, 3, 4]}, {"a": [4, 5], "b": [5, 6, 7, 8, 9]}]
    assert values(CombinedLoader(loaders(), "max_size_cycle")) == [
        {"a": [0, 1, 2, 3], "b": [0, 1, 2, 3, 4]}, {"a": [4, 5], "b": [5, 6, 7, 8, 9]},
        {"a": [0, 1, 2, 3], "b": [10, 11, 12, 13, 14]}]
    assert values(CombinedLoader(loaders(), "max_size")) == [
        {"a": [0, 1, 2, 3], "b": [0, 1, 2, 3, 4]}, {"a": [4, 5], "b": [5, 6, 7, 8, 9]},
        {"a": None, "b": [10, 11, 12, 13, 14]}]
    sequential = [(batch.tolist(), index, loader) for batch, index, loader in CombinedLoader(loaders(), "sequential")]
    assert [(index, loader) for _, index, loader in sequential] == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 1)]
    assert [len(CombinedLoader(loaders(), mode)) for mode in ("min_size", "max_size_cycle", "max_size",
                                                                 "sequential")] == [2, 3, 3, 5]


def test_lists_and_nesting_keep_their_shape_and_bad_input_is_named():
    nested = CombinedLoader([DataLoader(range(2)), {"x": DataLoader(range(2))}], "min_size")
    assert [[batch[0].tolist(), batch[1]["x"].tolist()] for batch in nested] == [[[0], [0]], [[1], [1]]]
    with pytest.raises(ValueError, match="mode='longest'"):
        CombinedLoader(loaders(), "longest")
    with pytest.raises(TypeError, match="has no length"):
        len(CombinedLoader({"a": iter([1, 2])}))


class TwoSources(framework.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(2, 1)
        self.seen: list = []

    def training_step(self, batch, batch_idx):
        self.seen.append({key: value[:, 0].tolist() for key, value in batch.items()})
        return sum(self.layer(value).sum() for value in batch.values())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def dataset(n: int, offset: float) -> torch.Tensor:
    return torch.stack([torch.arange(n, dtype=torch.float32) + offset, torch.zeros(n)], dim=1)


def combined(shuffle: bool = False) -> CombinedLoader:
    return CombinedLoader({"small": DataLoader(dataset(4, 0), batch_size=2, shuffle=shuffle),
                           "large": DataLoader(dataset(8, 100), batch_size=2, shuffle=shuffle)}, "max_size_cycle")


def test_training_on_a_combined_loader_matches_a_plain_loop():
    model = TwoSources()
    quiet_trainer(max_epochs=1).fit(model, combined())
    reference = TwoSources()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.01)
    for batch in combined():
        optimizer.zero_grad()
        reference.training_step(batch, 0).backward()
        optimizer.step()
    assert model.seen == reference.seen and len(model.seen) == 4
    assert model.seen[2]["small"] == [0.0, 1.0]  # the short loader started over
    torch.testing.assert_close(model.state_dict(), reference.state_dict(), rtol=0, atol=0)


def test_a_shuffled_combined_loader_draws_a_new_order_each_epoch():
    model = TwoSources()
    quiet_trainer(max_epochs=2).fit(model, combined(shuffle=True))
    first, second = model.seen[:4], model.seen[4:]
    assert sorted(sum((batch["large"] for batch in first), [])) == [100.0 + i for i in range(8)]
    assert first != second


def _ranks_see(rank: int) -> list:
    model = TwoSources()
    quiet_trainer(devices=2, strategy="ddp", max_epochs=1).fit(model, combined())
    return model.seen


def test_on_two_ranks_each_loader_of_the_combination_is_sharded():
    seen = spawn(2, _ranks_see)
    large = sorted(sum((batch["large"] for rank in seen for batch in rank), []))
    assert large == [100.0 + i for i in range(8)] and len(seen[0]) == len(seen[1]) == 2


def test_evaluation_runs_a_sequential_combination_loader_by_loader():
    class Evaluated(TwoSources):
        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.seen.append((dataloader_idx, batch_idx, batch[:, 0].tolist()))

    model = Evaluated()
    sequential = CombinedLoader([DataLoader(dataset(2, 0), batch_size=2), DataLoader(dataset(4, 10), batch_size=2)],
                                "sequential")
    quiet_trainer().validate(model, sequential, verbose=False)
    assert model.seen == [(0, 0, [0.0, 1.0]), (1, 0, [10.0, 11.0]), (1, 1, [12.0, 13.0])]
    with pytest.raises(MisconfigurationError, match="val_dataloader gave CombinedLoader\\(mode='min_size'\\)"):
        quiet_trainer().validate(model, CombinedLoader(loaders(), "min_size"))
    with pytest.raises(MisconfigurationError, match="train_dataloader gave CombinedLoader\\(mode='sequential'\\)"):
        quiet_trainer(max_steps=1).fit(model, sequential)
