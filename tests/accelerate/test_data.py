"""Prepared dataloaders on one process: the plain loop's order, the end of a pass, skipping, iterable datasets, and the
random numbers and metric lengths an Accelerate user sees."""

from __future__ import annotations

import pytest
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


# Recorded from Accelerate 1.15 (torch 2.14.1, CPU) running _masked_loop's loop with its own Accelerator:
# per batch, the sample indices, the sum of the masked inputs and the loss; then each weight tensor's sum.
_ACCELERATE_BATCHES = [
    ([17, 29, 16, 8, 22, 11, 14, 31], 0.336301, 0.14703), ([33, 3, 36, 7, 23, 15, 10, 30], 4.214156, 0.061555),
    ([18, 34, 6, 4, 2, 32, 24, 13], -6.182787, 0.106775), ([21, 27, 12, 26, 5, 19, 25, 28], 0.890385, 0.030368),
    ([20, 9, 0, 1, 35], -0.755631, 0.01999), ([35, 27, 28, 14, 3, 0, 11, 16], -0.531298, 0.017799),
    ([23, 30, 33, 22, 26, 20, 25, 36], 8.913771, 0.024304), ([1, 34, 10, 19, 32, 21, 8, 7], -0.263998, 0.014244),
    ([9, 24, 15, 29, 17, 12, 5, 4], -0.255018, 0.013807), ([31, 13, 6, 2, 18], -4.225296, 0.018267),
]
_ACCELERATE_WEIGHT_SUMS = [1.372572, -0.059392, 0.125123, -0.049963]
_ACCELERATE_NEXT_DRAW = 0.6085867881774902


def _masked_loop() -> tuple[list, list[float], float]:
    """A loop whose collate function draws masks from torch's generator and whose model has dropout, with an
    evaluation pass after each epoch."""
    from framework.accelerate.utils import set_seed

    set_seed(7)
    dataset = TensorDataset(torch.arange(37), torch.randn(37, 4))

    def collate(items):
        x = torch.stack([x for _, x in items])
        return torch.stack([index for index, _ in items]), x * (torch.rand(x.shape) > 0.3).float()

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(dataset, batch_size=8, shuffle=True, collate_fn=collate)
    evaluation = DataLoader(dataset, batch_size=8, collate_fn=collate)
    accelerator = Accelerator()
    model, optimizer, train, evaluation = accelerator.prepare(model, optimizer, train, evaluation)
    seen = []
    for _ in range(2):
        model.train()
        for index, x in train:
            loss = model(x).pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            seen.append((index.tolist(), x.sum().item(), loss.item()))
        model.eval()
        for _ in evaluation:
            pass
    return seen, [parameter.sum().item() for parameter in model.parameters()], torch.rand(1).item()


def test_a_prepared_loop_draws_the_same_batches_masks_and_dropout_as_accelerate():
    seen, weight_sums, next_draw = _masked_loop()
    assert [index for index, _, _ in seen] == [index for index, _, _ in _ACCELERATE_BATCHES]
    assert [value for _, *values in seen for value in values] == pytest.approx(
        [value for _, *values in _ACCELERATE_BATCHES for value in values], abs=2e-6)
    assert weight_sums == pytest.approx(_ACCELERATE_WEIGHT_SUMS, abs=2e-6)
    assert next_draw == _ACCELERATE_NEXT_DRAW


def test_gather_for_metrics_cuts_the_short_last_batch_on_one_process_as_accelerate():
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(_ids(20), batch_size=8))
    lengths, objects = [], []
    for (index,) in loader:
        loss = index.float().mean()
        lengths.append(len(accelerator.gather_for_metrics(loss.repeat(8))))
        assert accelerator.gather_for_metrics(loss).shape == ()
        objects.append(accelerator.gather_for_metrics([f"s{i}" for i in index.tolist()]))
    assert lengths == [8, 8, 4]  # Accelerate 1.15 returns these lengths
    assert objects[-1] == ["s16", "s17", "s18", "s19"]
    full = accelerator.prepare(DataLoader(_ids(16), batch_size=8))
    assert [len(accelerator.gather_for_metrics(index.float().mean().repeat(8))) for (index,) in full] == [8, 8]
