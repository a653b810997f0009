"""LearningRateFinder and BatchSizeFinder: the searches run when fit starts, and fit trains with what they found."""

from __future__ import annotations

import pytest

from framework.callbacks import BatchSizeFinder, LearningRateFinder
from framework.errors import MisconfigurationError
from framework.tuner import LRFinder
from tests.helpers import Regressor, loader, quiet_trainer
from tests.tuner.test_batch_size_scaling import Fits


def test_the_learning_rate_finder_applies_its_suggestion_to_the_running_fit():
    finder = LearningRateFinder(min_lr=1e-4, max_lr=1.0, num_training_steps=20, early_stop_threshold=None)
    model = Regressor(lr=0.05)
    trainer = quiet_trainer(max_epochs=2, callbacks=[finder])
    trainer.fit(model, loader(n=256))
    assert isinstance(finder.optimal_lr, LRFinder) and len(finder.optimal_lr.results["lr"]) == 20
    suggestion = finder.optimal_lr.suggestion()
    assert model.hparams.lr == suggestion and trainer.optimizers[0].param_groups[0]["lr"] == suggestion
    assert trainer.global_step == 2 * 32  # the search's steps are not the run's


def test_the_batch_size_finder_makes_fit_train_with_the_size_it_found():
    finder = BatchSizeFinder(max_trials=10)
    model = Fits(limit=40)
    trainer = quiet_trainer(max_epochs=1, callbacks=[finder])
    trainer.fit(model)
    assert finder.optimal_batch_size == 32 == model.batch_size
    assert model.tried[-1] == 32 and trainer.num_training_batches == 8  # the run's own loader has the new size


def test_the_batch_size_finder_refuses_loaders_passed_in():
    with pytest.raises(MisconfigurationError, match="cannot be used with dataloaders passed directly"):
        quiet_trainer(max_epochs=1, callbacks=[BatchSizeFinder()]).fit(Fits(), loader())


def test_the_finders_import_from_lightnings_paths_and_are_the_tuners():
    from framework.callbacks.batch_size_finder import BatchSizeFinder as by_module_path
    from framework.callbacks.lr_finder import LearningRateFinder as lr_by_module_path
    from framework.tuner import BatchSizeFinder as tuners
    from framework.tuner import LearningRateFinder as lr_tuners

    assert by_module_path is BatchSizeFinder is tuners and lr_by_module_path is LearningRateFinder is lr_tuners
