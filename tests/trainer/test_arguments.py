"""Bad input to the Trainer and to fit gets a MisconfigurationError naming the argument and the value."""

from __future__ import annotations

import pathlib
import re
import warnings
from datetime import timedelta

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import framework
from framework.errors import MisconfigurationError
from framework.utilities.warnings import PossibleUserWarning
from tests.helpers import RecordingLogger, Regressor, loader, quiet_trainer


def test_misconfiguration_error_is_a_value_error():
    assert issubclass(MisconfigurationError, ValueError)


# -- Trainer(...) arguments ---------------------------------------------------------------------------

class _NotACallback:
    def __repr__(self) -> str:  # the default names an address, which would make the test's id differ by process
        return "_NotACallback()"


_NOT_A_CALLBACK = _NotACallback()

# (keyword, bad value, a phrase of what is accepted that the message must also contain)
BAD_ARGUMENTS = [
    ("max_epochs", "x", r"int >= -1"),
    ("max_epochs", -2, r"int >= -1"),
    ("min_epochs", -1, r"int >= 0"),
    ("max_steps", 1.5, r"int >= -1"),
    ("max_time", "1 hour", r"DD:HH:MM:SS"),
    ("max_time", {"hourz": 1}, r"timedelta"),
    ("limit_train_batches", 1.5, r"between 0\.0 and 1\.0"),
    ("limit_val_batches", -1, r"int number of batches"),
    ("limit_test_batches", "all", r"int number of batches"),
    ("overfit_batches", 2.0, r"between 0\.0 and 1\.0"),
    ("val_check_interval", 0, r"int number of training batches >= 1"),
    ("val_check_interval", 1.5, r"\(0\.0, 1\.0\]"),
    ("check_val_every_n_epoch", 0, r"int >= 1 or None"),
    ("num_sanity_val_steps", -2, r"int >= -1"),
    ("log_every_n_steps", -1, r"int >= 0"),
    ("accumulate_grad_batches", 0, r"int >= 1"),
    ("gradient_clip_val", -1, r"number >= 0"),
    ("gradient_clip_algorithm", "l3", r"'norm', 'value'"),
    ("fast_dev_run", -1, r"True, False or an int"),
    ("accelerator", "tpux", r"'cpu', 'cuda', 'gpu'"),
    ("devices", "x", r"'auto', a positive int"),
    ("devices", 0, r"'auto', a positive int"),
    ("precision", "17", r"'32-true'"),
    ("strategy", "nonsense", r"'single'"),
    ("callbacks", [_NOT_A_CALLBACK], r"Callback instance"),
    ("logger", "yes", r"a Logger \(or an object with log_metrics\)"),
    ("default_root_dir", 3, r"a path"),
    ("inference_mode", "yes", r"True or False"),
    ("deterministic", "maybe", r"'warn'"),
    ("num_nodes", 0, r"positive int"),
]


def _shown(value):
    """How the message shows the offending value (one bad item of a list is shown by itself)."""
    return value[0] if isinstance(value, list) else value


@pytest.mark.parametrize(("name", "value", "accepted"), BAD_ARGUMENTS,
                         ids=[f"{n}={v!r}" for n, v, _ in BAD_ARGUMENTS])
def test_bad_trainer_argument_names_argument_and_value(name, value, accepted):
    with pytest.raises(MisconfigurationError, match=re.escape(f"{name}={_shown(value)!r}")) as info:
        quiet_trainer(**{name: value})
    assert re.search(accepted, str(info.value)), str(info.value)


def test_bad_argument_is_caught_as_value_error():
    with pytest.raises(ValueError, match=r"max_epochs='x'"):
        quiet_trainer(max_epochs="x")


@pytest.mark.parametrize("value", [True, 2.0, "3"])
def test_max_epochs_rejects_non_int_lookalikes(value):
    with pytest.raises(MisconfigurationError, match=re.escape(f"max_epochs={value!r}")):
        quiet_trainer(max_epochs=value)


@pytest.mark.parametrize("value", [{"hours": -1}, timedelta(seconds=-5), -1, True])
def test_negative_max_time_is_rejected(value):
    with pytest.raises(MisconfigurationError, match="max_time"):
        quiet_trainer(max_time=value)


def test_nan_gradient_clip_val_is_rejected():
    with pytest.raises(MisconfigurationError, match=r"gradient_clip_val=nan"):
        quiet_trainer(gradient_clip_val=float("nan"))


# -- valid spellings ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "expected"), [
    ("00:01:00:00", timedelta(hours=1)),
    (" 01:02:03:04 ", timedelta(days=1, hours=2, minutes=3, seconds=4)),
    ({"hours": 1}, timedelta(hours=1)),
    ({"minutes": 90, "seconds": 5}, timedelta(minutes=90, seconds=5)),
    (timedelta(minutes=5), timedelta(minutes=5)),
    (90, timedelta(seconds=90)),
    ("00:00:00:00", timedelta(0)),
    (None, None),
])
def test_max_time_spellings(value, expected):
    assert quiet_trainer(max_time=value).max_time == expected


def test_valid_arguments_are_kept():
    callback = framework.Callback()
    recorder = RecordingLogger()
    trainer = quiet_trainer(
        max_epochs=-1, max_steps=7, min_epochs=0, limit_train_batches=3, limit_val_batches=0.5,
        limit_test_batches=0, overfit_batches=0.0, val_check_interval=2, check_val_every_n_epoch=None,
        num_sanity_val_steps=-1, log_every_n_steps=0, accumulate_grad_batches=2, gradient_clip_val=1,
        gradient_clip_algorithm="value", devices="1", precision=32, strategy="single",
        callbacks=callback, logger=recorder, default_root_dir=pathlib.Path("some") / "dir",
        inference_mode=False, deterministic=None, num_nodes=1,
    )
    assert (trainer.max_epochs, trainer.max_steps, trainer.min_epochs) == (-1, 7, 0)
    assert (trainer.limit_train_batches, trainer.limit_val_batches, trainer.limit_test_batches) == (3, 0.5, 0)
    assert (trainer.val_check_interval, trainer.check_val_every_n_epoch) == (2, None)
    assert (trainer.num_sanity_val_steps, trainer.log_every_n_steps) == (-1, 0)
    assert trainer.accumulate_grad_batches == 2
    assert trainer.gradient_clip_val == 1.0 and trainer.gradient_clip_algorithm == "value"
    assert trainer.device_ids == [0] and trainer.precision == "32-true"
    assert trainer.callbacks == [callback] and trainer.loggers == [recorder]
    assert trainer.default_root_dir == str(pathlib.Path("some") / "dir")
    assert trainer.inference_mode is False


def test_defaults():
    trainer = quiet_trainer()
    assert trainer.max_epochs is None and trainer.max_steps == -1 and trainer.max_time is None
    assert trainer.num_sanity_val_steps == 2 and trainer.log_every_n_steps == 50
    assert trainer.gradient_clip_algorithm is None and trainer.val_check_interval == 1.0


@pytest.mark.parametrize(("bound", "limit"), [({}, 1000), ({"max_steps": 5}, -1), ({"max_time": "00:00:01:00"}, -1),
                                             ({"callbacks": [framework.callbacks.Timer(duration="00:00:01:00")]}, -1)])
def test_max_epochs_none_applies_lightnings_rule_and_reads_as_applied_after_fit(bound, limit):
    trainer = quiet_trainer(max_epochs=None, **bound)
    assert trainer.max_epochs is None and trainer.epoch_limit == limit
    data = loader(n=16, batch_size=8)  # 2 batches
    if limit == 1000:  # warned, as Lightning does, and stopped by the rule's limit
        trainer = quiet_trainer(max_epochs=None, limit_train_batches=1)
        with pytest.warns(PossibleUserWarning, match=r"`max_epochs` was not set\. Setting it to 1000 epochs"):
            trainer.fit(Regressor(), data)
        assert trainer.current_epoch == 1000 and trainer.max_epochs == 1000
        assert trainer.estimated_stepping_batches == 1000
    elif "max_steps" in bound:  # bounded otherwise: no warning
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="`max_epochs` was not set")
            trainer.fit(Regressor(), data)
        assert trainer.global_step == 5 and trainer.max_epochs == -1  # as Lightning's trainer reads after fit



@pytest.mark.parametrize(("limit", "steps"), [(3, 3), (0.5, 4), (1.0, 8), (100, 8), (0, 0)])
def test_limit_train_batches_as_int_and_float(limit, steps):
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=limit)
    trainer.fit(Regressor(), loader(n=64, batch_size=8))  # 8 batches
    assert trainer.global_step == steps


def test_fast_dev_run_true_runs_one_batch():
    trainer = quiet_trainer(fast_dev_run=True)
    trainer.fit(Regressor(), loader(), loader())
    assert trainer.global_step == 1


# -- errors found while fitting -----------------------------------------------------------------------

def _fit(model, train=None, val=None, ckpt_path=None, **trainer_kwargs):
    settings = dict(max_epochs=1, num_sanity_val_steps=0)
    settings.update(trainer_kwargs)
    trainer = quiet_trainer(**settings)
    trainer.fit(model, loader(n=16) if train is None else train, val, ckpt_path=ckpt_path)
    return trainer


class _ReturnsString(Regressor):
    def training_step(self, batch, batch_idx):
        return "oops"


class _ReturnsVector(Regressor):
    def training_step(self, batch, batch_idx):
        return torch.stack([self.loss(batch), self.loss(batch)])


class _ReturnsDictWithoutLoss(Regressor):
    def training_step(self, batch, batch_idx):
        return {"error": self.loss(batch)}


class _ReturnsDictWithVectorLoss(Regressor):
    def training_step(self, batch, batch_idx):
        return {"loss": torch.stack([self.loss(batch), self.loss(batch)])}


def test_training_step_returning_a_string():
    with pytest.raises(MisconfigurationError, match=r"training_step returned 'oops' \(type str\)") as info:
        _fit(_ReturnsString())
    assert "loss tensor" in str(info.value)


def test_training_step_returning_a_vector():
    with pytest.raises(MisconfigurationError, match=r"training_step returned a loss of shape \(2,\)"):
        _fit(_ReturnsVector())


def test_training_step_returning_a_dict_without_loss():
    with pytest.raises(MisconfigurationError, match=r"training_step returned a dict whose 'loss' is None"):
        _fit(_ReturnsDictWithoutLoss())


def test_training_step_returning_a_dict_with_a_vector_loss():
    with pytest.raises(MisconfigurationError, match=r"training_step.*shape \(2,\)"):
        _fit(_ReturnsDictWithVectorLoss())


class _Optimizers(Regressor):
    def __init__(self, returned, manual=False):
        super().__init__()
        self.returned = returned
        self.automatic_optimization = not manual

    def configure_optimizers(self):
        return self.returned(self) if callable(self.returned) else self.returned

    def training_step(self, batch, batch_idx):
        if self.automatic_optimization:
            return super().training_step(batch, batch_idx)
        return None


def test_configure_optimizers_returning_a_string_lists_accepted_forms():
    expected = r"configure_optimizers returned 'adam' \(type str\)"
    with pytest.raises(MisconfigurationError, match=expected) as info:
        _fit(_Optimizers("adam"))
    message = str(info.value)
    for form in ("an optimizer", "a tuple of two lists", '{"optimizer": optimizer', "None (only with manual"):
        assert form in message, message


def test_configure_optimizers_returning_none_with_automatic_optimization():
    expected = r"configure_optimizers returned None.*automatic_optimization = False"
    with pytest.raises(MisconfigurationError, match=expected):
        _fit(_Optimizers(None))


def test_configure_optimizers_returning_none_is_fine_with_manual_optimization():
    assert _fit(_Optimizers(None, manual=True)).global_step == 0


def test_two_optimizers_need_manual_optimization():
    def two(module):
        return [torch.optim.SGD(module.parameters(), lr=0.1), torch.optim.Adam(module.parameters())]

    with pytest.raises(MisconfigurationError, match=r"returned 2 optimizers.*automatic_optimization = False"):
        _fit(_Optimizers(two))


def test_reduce_lr_on_plateau_without_monitor():
    def plateau(module):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)}

    expected = r"ReduceLROnPlateau needs a metric to monitor.*'monitor'"
    with pytest.raises(MisconfigurationError, match=expected):
        _fit(_Optimizers(plateau))


def test_reduce_lr_on_plateau_monitoring_a_metric_never_logged():
    def plateau(module):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_acc"}}

    with pytest.raises(MisconfigurationError, match=r"monitors 'val_acc', which was not logged") as info:
        _fit(_Optimizers(plateau))
    assert "train_loss" in str(info.value)  # the metrics that were logged are listed


def test_reduce_lr_on_plateau_with_strict_false_skips_the_missing_metric():
    def plateau(module):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "monitor": "val_acc", "strict": False}}

    assert _fit(_Optimizers(plateau)).global_step == 2


def test_empty_training_dataloader():
    empty = DataLoader(TensorDataset(torch.empty(0, 4), torch.empty(0, 1)), batch_size=8)
    with pytest.raises(MisconfigurationError, match=r"training dataloader is empty \(0 batches\)"):
        _fit(Regressor(), train=empty)


def test_val_check_interval_beyond_the_epoch():
    with pytest.raises(MisconfigurationError, match=r"val_check_interval=20\).*10 training batches"):
        _fit(Regressor(), train=loader(n=80, batch_size=8), val=loader(), val_check_interval=20)


def test_val_check_interval_beyond_the_epoch_is_fine_counting_across_epochs():
    trainer = _fit(Regressor(), train=loader(n=80, batch_size=8), val=loader(), val_check_interval=20,
                   check_val_every_n_epoch=None, max_epochs=2)
    assert trainer.global_step == 20 and "val_loss" in trainer.callback_metrics


def test_float_val_check_interval_needs_epochs():
    with pytest.raises(MisconfigurationError,
                       match=r"val_check_interval=0\.5, check_val_every_n_epoch=None.*must be an int"):
        quiet_trainer(val_check_interval=0.5, check_val_every_n_epoch=None)  # refused at once, as in Lightning


def test_without_epochs_the_default_interval_validates_every_epochs_worth_of_batches():
    trainer = _fit(Regressor(), train=loader(n=80, batch_size=8), val=loader(), check_val_every_n_epoch=None,
                   max_epochs=2, num_sanity_val_steps=0)
    assert trainer.val_check_batch == 10 and "val_loss" in trainer.callback_metrics


def test_gradient_clip_val_with_manual_optimization():
    with pytest.raises(MisconfigurationError, match=r"gradient_clip_val=1\.0\).*manual optimization"):
        model = _Optimizers(lambda m: torch.optim.SGD(m.parameters(), lr=0.1), manual=True)
        _fit(model, gradient_clip_val=1.0)


class _Logs(Regressor):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.args, self.kwargs = args, kwargs

    def training_step(self, batch, batch_idx):
        self.log(*self.args, **self.kwargs)
        return super().training_step(batch, batch_idx)


def test_log_a_non_scalar_tensor():
    with pytest.raises(MisconfigurationError, match=r"self\.log\('bad', value\).*shape \(3,\)"):
        _fit(_Logs("bad", torch.ones(3)))


def test_log_a_string():
    with pytest.raises(MisconfigurationError, match=r"self\.log\('bad', value\) got 'high' \(type str\)"):
        _fit(_Logs("bad", "high"))


def test_log_an_unknown_reduce_fx():
    with pytest.raises(MisconfigurationError, match=r"self\.log\('bad', reduce_fx='median'\).*'mean', 'sum'"):
        _fit(_Logs("bad", 1.0, reduce_fx="median"))


def test_ckpt_path_best_without_a_checkpoint_callback():
    with pytest.raises(MisconfigurationError, match=r"ckpt_path='best' needs a ModelCheckpoint.*is no ModelCheckpoint"):
        _fit(Regressor(), ckpt_path="best")


def test_test_with_ckpt_path_best_without_a_checkpoint_callback():
    with pytest.raises(MisconfigurationError, match=r"ckpt_path='best' needs a ModelCheckpoint.*is no ModelCheckpoint"):
        quiet_trainer().test(Regressor(), loader(n=16), ckpt_path="best", verbose=False)


class _TrainOnly(framework.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_validate_without_validation_step():
    expected = r"trainer\.validate\(\) needs _TrainOnly\.validation_step"
    with pytest.raises(MisconfigurationError, match=expected):
        quiet_trainer().validate(_TrainOnly(), loader(n=16), verbose=False)


def test_fit_with_a_model_that_is_not_a_framework_module():
    # A TypeError, as Lightning raises, so `except TypeError` in a user's script still catches it.
    with pytest.raises(TypeError, match=r"trainer\.fit\(model=Linear\(.*\(type Linear\)\).*framework\.Module"):
        quiet_trainer(max_epochs=1).fit(nn.Linear(4, 1), loader(n=16))
    with pytest.raises(TypeError, match=r"trainer\.validate\(\) needs a model"):
        quiet_trainer().validate(dataloaders=loader(n=16))


def test_loaders_and_a_datamodule_at_once_are_refused():
    datamodule = framework.DataModule()
    with pytest.raises(MisconfigurationError, match=r"trainer\.fit got dataloaders and a datamodule"):
        quiet_trainer(max_epochs=1).fit(Regressor(), loader(n=16), datamodule=datamodule)
    with pytest.raises(MisconfigurationError, match=r"trainer\.test got dataloaders and a datamodule"):
        quiet_trainer().test(Regressor(), loader(n=16), datamodule=datamodule)


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"min_epochs": 5, "max_epochs": 2}, "min_epochs=5, max_epochs=2"),
    ({"min_steps": 5, "max_steps": 2}, "min_steps=5, max_steps=2"),
])
def test_a_minimum_above_its_maximum_is_refused(kwargs, named):
    with pytest.raises(MisconfigurationError, match=re.escape(named)):
        quiet_trainer(**kwargs)


def test_a_string_is_not_a_loader():
    with pytest.raises(MisconfigurationError, match="train_dataloader gave 'abc'"):
        quiet_trainer(max_epochs=1).fit(Regressor(), "abc")


def test_overfit_batches_errors_name_overfit_batches():
    with pytest.raises(MisconfigurationError, match="overfit_batches=0.01"):
        quiet_trainer(max_epochs=1, overfit_batches=0.01).fit(Regressor(), loader(n=64))


def test_gradient_clip_algorithm_is_case_insensitive():
    assert quiet_trainer(gradient_clip_algorithm="Norm").gradient_clip_algorithm == "norm"


# -- barebones ---

def test_barebones_turns_off_what_costs_speed_and_refuses_what_asks_for_it_back(caplog):
    trainer = framework.Trainer(accelerator="cpu", barebones=True, max_epochs=1)
    assert trainer.loggers == [] and trainer.callbacks == [] and trainer.log_every_n_steps == 0
    assert not (trainer.enable_checkpointing or trainer.enable_progress_bar or trainer.enable_model_summary)
    assert trainer.num_sanity_val_steps == 0
    trainer.fit(Regressor(), loader(), loader())
    assert trainer.global_step == 8
    framework.Trainer(accelerator="cpu", barebones=True, logger=False, enable_checkpointing=False)  # agreeing is fine
    for given in ({"logger": True}, {"enable_checkpointing": True}, {"enable_progress_bar": True},
                  {"enable_model_summary": True}, {"log_every_n_steps": 5}, {"num_sanity_val_steps": 2},
                  {"fast_dev_run": True}, {"detect_anomaly": True}):
        (name, value), = given.items()
        with pytest.raises(MisconfigurationError, match=rf"Trainer\(barebones=True, {name}={value!r}"):
            framework.Trainer(accelerator="cpu", barebones=True, **given)


# -- defaults from the environment ---

def test_trainer_defaults_come_from_the_environment_under_our_prefix_and_lightnings(monkeypatch):
    monkeypatch.setenv("PL_TRAINER_MAX_EPOCHS", "3")
    monkeypatch.setenv("PL_TRAINER_LOGGER", "False")
    monkeypatch.setenv("FRAMEWORK_TRAINER_LOGGER", "True")  # ours wins where both are set
    monkeypatch.setenv("PL_TRAINER_ACCELERATOR", "cpu")  # a bare word is taken as text
    monkeypatch.setenv("PL_TRAINER_LIMIT_VAL_BATCHES", "")  # empty: not set
    trainer = framework.Trainer(enable_progress_bar=False, default_root_dir="env_run")
    assert trainer.max_epochs == 3 and len(trainer.loggers) == 1 and trainer.limit_val_batches == 1.0
    assert framework.Trainer(max_epochs=5, logger=False).max_epochs == 5  # what is given explicitly wins
    monkeypatch.setenv("FRAMEWORK_TRAINER_MAX_STEPS", "'seven'")
    with pytest.raises(MisconfigurationError, match=r"max_steps='seven'"):  # checked like any other value
        framework.Trainer(logger=False)


@pytest.mark.parametrize(("given", "note"), [
    ({"limit_train_batches": 1}, "`Trainer(limit_train_batches=1)` was configured so 1 batch per epoch will be used."),
    ({"limit_val_batches": 1.0}, "`Trainer(limit_val_batches=1.0)` was configured so 100% of the batches will be "
                                 "used."),
    ({"overfit_batches": 1}, "`Trainer(overfit_batches=1)` was configured so 1 batch will be used."),
    ({"val_check_interval": 1}, "`Trainer(val_check_interval=1)` was configured so validation will run after every "
                                "batch."),
    ({"val_check_interval": 1.0}, "`Trainer(val_check_interval=1.0)` was configured so validation will run at the "
                                  "end of the training epoch."),
])
def test_a_limit_of_one_says_whether_it_means_one_batch_or_all_of_them(caplog, given, note):
    with caplog.at_level("INFO", logger="framework"):
        framework.Trainer(accelerator="cpu", **given)
    assert note in caplog.messages


def test_default_limits_say_nothing(caplog):
    with caplog.at_level("INFO", logger="framework"):
        framework.Trainer(accelerator="cpu", limit_train_batches=2, limit_val_batches=0.5)
    assert not [m for m in caplog.messages if "was configured so" in m]


def test_any_object_that_logs_like_a_logger_is_taken_as_in_lightning():
    class Recording:  # no framework Logger: only what the Trainer calls on one
        name, version, save_dir, log_dir = "duck", 0, None, None

        def __init__(self):
            self.metrics: list = []

        def log_metrics(self, metrics, step):
            self.metrics.append((step, sorted(metrics)))

        def log_hyperparams(self, params, *args, **kwargs): ...

        def log_graph(self, model, input_array=None): ...

        def save(self): ...

        def after_save_checkpoint(self, checkpoint_callback): ...

        def finalize(self, status): ...

    duck = Recording()
    trainer = quiet_trainer(max_steps=2, logger=duck, log_every_n_steps=1)
    trainer.fit(Regressor(), loader())
    assert trainer.logger is duck and duck.metrics and duck.metrics[0][0] == 0
    with pytest.raises(MisconfigurationError, match="Trainer\\(logger='csv'.*accepted True, False, a Logger"):
        framework.Trainer(logger="csv")
