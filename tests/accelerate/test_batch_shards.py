"""Dealing a pass's batches to the ranks as Accelerate 1.15 does (its BatchSamplerShard, observed on CPU)."""

from __future__ import annotations

import pytest

from framework.accelerate.batch_shards import batch_length, deal, filled_indices, rank_batch_count, repeated_batches


def _batches(count: int, size: int, drop_last: bool = False) -> list[list[int]]:
    batches = [list(range(start, min(start + size, count))) for start in range(0, count, size)]
    return [batch for batch in batches if len(batch) == size] if drop_last else batches


def _dealt(count: int, size: int, ranks: int, last_round, drop_last: bool = False) -> list[list[tuple]]:
    return [list(deal(_batches(count, size, drop_last), ranks, rank, len, size, last_round)) for rank in range(ranks)]


def test_batch_i_goes_to_rank_i_mod_n_and_the_last_round_is_completed_from_the_first_samples():
    ranks = _dealt(101, 8, 2, filled_indices(2, 8))
    assert [batch for batch, _ in ranks[0]][:2] == [list(range(0, 8)), list(range(16, 24))]
    assert [batch for batch, _ in ranks[1]][:2] == [list(range(8, 16)), list(range(24, 32))]
    assert ranks[0][-1] == ([96, 97, 98, 99, 100, 0, 1, 2], 5)  # 5 real samples in the last round
    assert ranks[1][-1] == ([3, 4, 5, 6, 7, 8, 9, 10], 5)
    assert all(remainder == 0 for rank in ranks for _, remainder in rank[:-1])
    joined = [index for step in zip(*ranks, strict=True) for batch, _ in step for index in batch]
    assert joined[:101] == list(range(101))  # gathered in rank order: the dataset in order, repeats last


@pytest.mark.parametrize(("count", "size", "ranks", "expected"), [
    (10, 4, 3, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]),   # a full round whose last batch is short
    (3, 4, 2, [[0, 1, 2, 0], [1, 2, 0, 1]]),                # fewer samples than one round: cycled again
    (16, 4, 2, None),                                       # nothing to complete
])
def test_short_passes_are_completed_like_accelerates(count, size, ranks, expected):
    dealt = _dealt(count, size, ranks, filled_indices(ranks, size))
    if expected is None:
        assert all(remainder == 0 for rank in dealt for _, remainder in rank)
        return
    assert [rank[-1][0] for rank in dealt] == expected
    assert {rank[-1][1] for rank in dealt} == {count % (size * ranks) or count}


def test_uneven_batches_and_drop_last():
    uneven = _dealt(10, 4, 2, "uneven")
    assert [[batch for batch, _ in rank] for rank in uneven] == [[[0, 1, 2, 3], [8, 9]], [[4, 5, 6, 7]]]
    dropped = _dealt(11, 2, 2, "drop", drop_last=True)  # 5 full batches: the fifth has no partner and goes
    assert [[batch for batch, _ in rank] for rank in dropped] == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]
    for rank in range(2):
        assert rank_batch_count(5, 2, rank, drop_last=True, even_batches=True) == 2
        assert rank_batch_count(3, 2, rank, drop_last=False, even_batches=False) == [2, 1][rank]
        assert rank_batch_count(3, 2, rank, drop_last=False, even_batches=True) == 2


def test_collated_batches_are_completed_with_the_first_rounds():
    batches = [f"b{index}" for index in range(5)]
    dealt = [list(deal(batches, 3, rank, lambda batch: 2, None, repeated_batches(3))) for rank in range(3)]
    assert [[batch for batch, _ in rank] for rank in dealt] == [["b0", "b3"], ["b1", "b4"], ["b2", "b2"]]
    assert dealt[2][-1][1] == 4  # two real batches of two samples in the last round


def test_batch_length_reads_the_first_tensor():
    import torch

    assert batch_length((torch.zeros(5, 3), torch.zeros(5))) == 5
    assert batch_length({"ids": torch.zeros(7, 2)}) == 7
    assert batch_length(["a", "b"]) == 2
