"""Tuner.lr_find: the range test on a real model, its suggestion, and that nothing else changes."""

from __future__ import annotations

import math
import sys

import pytest
import torch

from framework.errors import MisconfigurationError, MissingPackageError
from framework.strategies import DDPStrategy, SingleDeviceStrategy
from framework.tuner import LRFinder, Tuner
from tests.helpers import Regressor, loader, quiet_trainer


def _weights(model):
    return {name: value.clone() for name, value in model.state_dict().items()}


def test_lr_find_suggests_a_rate_writes_it_and_leaves_model_and_trainer_as_they_were():
    model, trainer = Regressor(lr=0.05), quiet_trainer(max_epochs=1)
    before = _weights(model)
    finder = Tuner(trainer).lr_find(model, loader(n=256), min_lr=1e-5, max_lr=1.0, num_training=30,
                                    early_stop_threshold=None)
    lrs = finder.results["lr"]
    assert len(lrs) == len(finder.results["loss"]) == 30
    ratios = [b / a for a, b in zip(lrs, lrs[1:])]
    assert all(math.isclose(r, ratios[0], rel_tol=1e-6) for r in ratios) and lrs[0] == pytest.approx(1e-5)
    suggestion = finder.suggestion()
    assert 1e-5 <= suggestion <= 1.0 and model.hparams.lr == suggestion
    for name, value in _weights(model).items():
        assert torch.equal(value, before[name]), name  # the search's steps are undone
    assert trainer.global_step == 0 and trainer.optimizers == []  # the user's Trainer did not run
    trainer.fit(model, loader())
    assert trainer.global_step == 8 and trainer.optimizers[0].param_groups[0]["lr"] == suggestion


def test_a_strategy_instance_given_to_the_trainer_serves_the_search_and_then_the_users_run():
    trainer = quiet_trainer(strategy=SingleDeviceStrategy(), max_epochs=1)
    model = Regressor()
    Tuner(trainer).lr_find(model, loader(n=256), num_training=20, early_stop_threshold=None)
    trainer.fit(model, loader())
    assert trainer.global_step == 8 and trainer.optimizers[0].param_groups[0]["lr"] == model.hparams.lr


def test_a_diverging_loss_ends_the_search_early_and_linear_mode_steps_evenly():
    finder = Tuner(quiet_trainer()).lr_find(Regressor(), loader(n=512), min_lr=1e-3, max_lr=1e3, num_training=60,
                                            update_attr=False)
    assert 2 < len(finder.results["lr"]) < 60
    linear = Tuner(quiet_trainer()).lr_find(Regressor(), loader(n=256), min_lr=0.01, max_lr=0.1, num_training=10,
                                            mode="linear", update_attr=False, early_stop_threshold=None)
    assert linear.results["lr"] == pytest.approx([0.01 + 0.009 * step for step in range(10)])


def test_the_suggestion_is_the_steepest_descent_and_none_without_enough_points():
    finder = LRFinder("exponential", 1e-3, 1.0, 6)
    finder.results = {"lr": [1, 2, 3, 4, 5, 6, 7], "loss": [5.0, 4.9, 4.0, 1.0, 0.9, 0.8, 3.0]}
    assert finder.suggestion(skip_begin=0, skip_end=1) == 3  # the loss falls fastest around the third point
    with pytest.warns(UserWarning, match="not enough points"):
        assert finder.suggestion(skip_begin=6) is None


def test_what_lr_find_cannot_do_is_said():
    with pytest.raises(MisconfigurationError, match="either specify the attr_name or have a `lr`/`learning_rate`"):
        class NoLr(Regressor):
            def __init__(self):
                super().__init__()
                self._hparams = type(self.hparams)()

        Tuner(quiet_trainer()).lr_find(NoLr(), loader())
    with pytest.raises(MisconfigurationError, match=r"mode='cosine'"):
        Tuner(quiet_trainer()).lr_find(Regressor(), loader(), mode="cosine")
    with pytest.raises(MisconfigurationError, match=r"min_lr=1.0, max_lr=0.1"):
        Tuner(quiet_trainer()).lr_find(Regressor(), loader(), min_lr=1.0, max_lr=0.1)


def test_plot_draws_with_matplotlib_or_names_the_extra(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="the dev extra installs matplotlib")
    finder = Tuner(quiet_trainer()).lr_find(Regressor(), loader(n=256), num_training=20, update_attr=False)
    figure = finder.plot(suggest=True)
    figure.savefig(tmp_path / "lr.png")
    assert (tmp_path / "lr.png").stat().st_size > 0
    curve, suggestion = figure.axes[0].lines
    assert list(curve.get_xdata()) == finder.results["lr"] and figure.axes[0].get_xscale() == "log"
    assert list(suggestion.get_xdata()) == [finder.suggestion()]
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingPackageError, match=r'LRFinder.plot\(\) needs matplotlib.*"framework\[matplotlib\]"'):
        finder.plot()


def test_on_two_ranks_rank_zeros_record_comes_back_and_a_divergence_stops_both():
    model = Regressor(lr=0.05)
    before = _weights(model)
    finder = Tuner(quiet_trainer(devices=2)).lr_find(model, loader(n=512), min_lr=1e-5, max_lr=1.0, num_training=20,
                                                     early_stop_threshold=None)
    assert len(finder.results["lr"]) == len(finder.results["loss"]) == 20
    assert finder.results["lr"][0] == pytest.approx(1e-5) and model.hparams.lr == finder.suggestion()
    assert all(torch.equal(value, before[name]) for name, value in _weights(model).items())
    # A strategy instance is shared by the user's Trainer and the trial Trainers made from its arguments.
    trainer = quiet_trainer(devices=2, strategy=DDPStrategy(), max_epochs=1)
    diverged = Tuner(trainer).lr_find(Regressor(), loader(n=1024), min_lr=1e-3, max_lr=1e3, num_training=60,
                                      update_attr=False)
    assert 2 < len(diverged.results["lr"]) < 60  # stopped together: no rank waits for the other
    trainer.fit(Regressor(), loader())
    assert trainer.global_step == 4 and trainer.strategy.world_size == 2


def test_after_the_search_the_model_is_attached_to_the_users_trainer_and_its_logger():
    from framework.loggers import CSVLogger

    model, trainer = Regressor(), quiet_trainer(max_epochs=1, logger=CSVLogger("logs"))
    Tuner(trainer).lr_find(model, loader(n=256), num_training=5, early_stop_threshold=None)
    assert model.trainer is trainer and model.logger is trainer.logger is not None  # as after Lightning's
