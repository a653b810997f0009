"""SpikeDetection: a loss spike stops training and names the batches to skip; a smooth run goes on."""

from __future__ import annotations

import json
import math

import pytest

from framework.callbacks import SpikeDetection, TrainingSpikeException
from framework.errors import MisconfigurationError
from tests.helpers import Regressor, loader, quiet_trainer


class SpikesAt(Regressor):
    def __init__(self, batch: int, factor: float = 50.0, rank: int | None = None):
        super().__init__()
        self.spike_batch, self.factor, self.rank = batch, factor, rank

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        if batch_idx == self.spike_batch and self.rank in (None, self.trainer.global_rank):
            return loss * self.factor
        return loss


def test_a_spike_raises_and_writes_the_batches_to_skip(tmp_path):
    detector = SpikeDetection()
    trainer = quiet_trainer(max_epochs=1, callbacks=[detector], default_root_dir=tmp_path)
    with pytest.raises(TrainingSpikeException, match="Training spike detected in batch 5") as raised:
        trainer.fit(SpikesAt(5), loader())
    assert raised.value.batch_idx == 5
    assert json.loads((tmp_path / "skip_batches.json").read_text()) == [4, 5]


def test_a_smooth_run_and_an_improvement_are_no_spikes(tmp_path):
    trainer = quiet_trainer(max_epochs=2, callbacks=[SpikeDetection(exclude_batches_path=tmp_path / "s.json")])
    trainer.fit(SpikesAt(5, factor=0.01), loader())  # a sudden drop in a "min" loss is good news
    assert trainer.global_step == 16 and not (tmp_path / "s.json").exists()


def test_a_non_finite_loss_is_a_spike_unless_finite_only_is_off():
    detector = SpikeDetection(rtol=None)
    detector.recent.extend([1.0, 1.0])
    detector.last_val = 1.0
    assert detector._is_spike(math.nan) and detector._is_spike(math.inf)
    assert not SpikeDetection(finite_only=False)._is_spike(math.nan)
    detector = SpikeDetection(atol=5.0, rtol=None)
    detector.recent.extend([1.0, 1.0])
    detector.last_val = 1.0
    assert not detector._is_spike(4.0) and detector._is_spike(7.0)  # atol: 5 away from the mean of 1


def test_a_spike_on_one_rank_stops_both(tmp_path):
    trainer = quiet_trainer(devices=2, max_epochs=1, callbacks=[SpikeDetection()], default_root_dir=tmp_path)
    with pytest.raises(TrainingSpikeException, match="batch 2"):
        trainer.fit(SpikesAt(2, rank=1), loader())
    assert json.loads((tmp_path / "skip_batches.json").read_text()) == [1, 2]  # written by rank 0


def test_bad_arguments():
    with pytest.raises(MisconfigurationError, match="mode='up'"):
        SpikeDetection(mode="up")
    with pytest.raises(MisconfigurationError, match="window=0"):
        SpikeDetection(window=0)
