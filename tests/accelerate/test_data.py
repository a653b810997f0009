"""Prepared dataloaders on one process: the plain loop's order, the end of a pass, skipping, iterable datasets."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from framework.accelerate import Accelerator, skip_first_batches


def _ids(count: int = 20) -> TensorDataset:
    return TensorDataset(torch.arange(count))


def _batches(loader) -> list[list[int]]:
    return [batch[0].tolist() for batch in loader]


def test_a_shuffled_loader_gives_the_plain_loops_order_and_random_state():
    torch.manual_seed(3)
    plain = [_batches(DataLoader(_ids(), batch_size=8, shuffle=True)) for _ in range(2)]
    after_plain = torch.rand(1)
    torch.manual_seed(3)
    loader = Accelerator(cpu=True).prepare(DataLoader(_ids(), batch_size=8, shuffle=True))
    assert [_batches(loader) for _ in range(2)] == plain
    assert torch.equal(torch.rand(1), after_plain)


def test_end_of_dataloader_is_known_at_the_last_batch_of_each_nested_pass():
    accelerator = Accelerator(cpu=True)
    train = accelerator.prepare(DataLoader(_ids(10), batch_size=4))
    evaluation = accelerator.prepare(DataLoader(_ids(4), batch_size=2))
    seen = []
    for _ in train:
        seen.append(("train", accelerator.gradient_state.end_of_dataloader))
        for _ in evaluation:
            seen.append(("eval", accelerator.gradient_state.end_of_dataloader))
        assert accelerator.gradient_state.active_dataloader is train
    assert seen[:3] == [("train", False), ("eval", False), ("eval", True)]
    assert [flag for where, flag in seen if where == "train"] == [False, False, True]
    assert not accelerator.gradient_state.in_dataloader


def test_skip_first_batches_starts_inside_the_pass_without_loading_the_skipped_batches():
    loaded = []

    class Recording(TensorDataset):
        def __getitem__(self, index):
            loaded.append(index)
            return super().__getitem__(index)

    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(Recording(torch.arange(10)), batch_size=2))
    skipped = accelerator.skip_first_batches(loader, 3)
    assert len(skipped) == 2 and _batches(skipped) == [[6, 7], [8, 9]] and loaded == [6, 7, 8, 9]
    assert _batches(skip_first_batches(DataLoader(_ids(6), batch_size=2), 1)) == [[2, 3], [4, 5]]


class _Stream(IterableDataset):
    def __init__(self, count: int) -> None:
        self.count = count

    def __iter__(self):
        return iter(torch.arange(self.count))


def test_an_iterable_dataset_is_dealt_out_and_its_last_batch_known():
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(_Stream(7), batch_size=3))
    ends = []
    for batch in loader:
        ends.append((batch.tolist(), accelerator.gradient_state.end_of_dataloader))
    assert ends == [([0, 1, 2], False), ([3, 4, 5], False), ([6], True)]


def test_the_position_resumes_the_interrupted_pass_exactly():
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(5)
    loader = accelerator.prepare(DataLoader(_ids(), batch_size=4, shuffle=True))
    whole = _batches(loader)
    torch.manual_seed(5)
    loader = accelerator.prepare(DataLoader(_ids(), batch_size=4, shuffle=True))
    iterator = iter(loader)
    first_two = [next(iterator)[0].tolist(), next(iterator)[0].tolist()]
    state, rng = loader.state_dict(), torch.get_rng_state()
    rest = [batch[0].tolist() for batch in iterator]
    assert first_two + rest == whole
    resumed = accelerator.prepare(DataLoader(_ids(), batch_size=4, shuffle=True))
    resumed.load_state_dict(state)
    torch.set_rng_state(rng)
    assert _batches(resumed) == rest
    assert state["in_pass"] and state["position"] == 2 and "seed" in state["order"]
    finished = loader.state_dict()
    assert not finished["in_pass"] and finished["passes"] == 1
