"""LambdaCallback: functions run at their hooks; unknown hook names are refused."""

from __future__ import annotations

import pytest

import framework
from framework.callbacks import LambdaCallback
from framework.errors import MisconfigurationError
from tests.helpers import Regressor, loader, quiet_trainer


def test_each_function_runs_at_its_hook_with_the_hooks_arguments():
    calls = []
    callback = LambdaCallback(
        on_train_epoch_end=lambda trainer, module: calls.append(("epoch_end", trainer.current_epoch)),
        on_train_batch_end=lambda trainer, module, outputs, batch, batch_idx: calls.append(("batch", batch_idx)),
    )
    quiet_trainer(max_epochs=2, limit_train_batches=2, callbacks=[callback]).fit(Regressor(), loader())
    assert calls == [("batch", 0), ("batch", 1), ("epoch_end", 0), ("batch", 0), ("batch", 1), ("epoch_end", 1)]


def test_an_unknown_hook_is_refused():
    with pytest.raises(MisconfigurationError, match=r"\['on_epoch_end'\], which are not callback hooks"):
        LambdaCallback(on_epoch_end=print)
    with pytest.raises(MisconfigurationError, match=r"on_fit_start=...\) needs a callable"):
        LambdaCallback(on_fit_start=3)


def test_setup_and_teardown_get_the_stage_by_keyword_as_in_lightning():
    seen = []

    class Keywords(framework.Callback):
        def setup(self, trainer, module, **kwargs):
            seen.append(("setup", kwargs))

        def teardown(self, trainer, module, **kwargs):
            seen.append(("teardown", kwargs))

    quiet_trainer(max_epochs=1, callbacks=[Keywords()]).fit(Regressor(), loader())
    assert seen == [("setup", {"stage": "fit"}), ("teardown", {"stage": "fit"})]
