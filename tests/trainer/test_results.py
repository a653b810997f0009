"""``self.log``: epoch reductions checked by hand, torchmetrics objects, logged steps and metric dicts."""

from __future__ import annotations

import pytest
import torch
import torchmetrics
from torch.utils.data import DataLoader, TensorDataset

import framework
from framework.testing import spawn
from framework.utilities import rank_zero_only
from tests.helpers import RecordingLogger, Regressor, loader, quiet_trainer


class LogsValues(Regressor):
    """Logs the batch's first x value with the given settings, from training and validation."""

    def __init__(self, **log_settings):
        super().__init__()
        self.log_settings = log_settings
        self.values: list[tuple[float, int]] = []

    def training_step(self, batch, batch_idx):
        value = batch[0][0, 0] * 10
        self.values.append((value.item(), len(batch[0])))
        self.log("value", value, **self.log_settings)
        return self.loss(batch)


def _uneven_loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(10, 4), torch.randn(10, 1)), batch_size=4)  # 4, 4, 2


def test_epoch_mean_is_weighted_by_batch_size():
    model = LogsValues(on_step=False, on_epoch=True)
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(model, _uneven_loader())
    expected = sum(v * n for v, n in model.values) / sum(n for _, n in model.values)
    assert trainer.callback_metrics["value"].item() == pytest.approx(expected, rel=1e-5)


def test_explicit_batch_size_overrides_the_inferred_one():
    model = LogsValues(on_step=False, on_epoch=True, batch_size=1)
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(model, _uneven_loader())
    expected = sum(v for v, _ in model.values) / len(model.values)
    assert trainer.callback_metrics["value"].item() == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize(("reduce_fx", "reduce"), [
    ("sum", sum), ("max", max), ("min", min), (torch.max, max),
    (lambda values: values.median(), lambda values: sorted(values)[(len(values) - 1) // 2]),
])
def test_other_reductions(reduce_fx, reduce):
    model = LogsValues(on_step=False, on_epoch=True, reduce_fx=reduce_fx)
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(model, loader(n=48))
    expected = reduce([v for v, _ in model.values])
    assert trainer.callback_metrics["value"].item() == pytest.approx(expected, rel=1e-5)


def test_python_numbers_and_long_epochs_fold_correctly():
    class Counts(Regressor):
        def training_step(self, batch, batch_idx):
            self.log("index", batch_idx, on_step=False, on_epoch=True, reduce_fx="sum")
            self.log("mean_index", float(batch_idx), on_step=False, on_epoch=True, batch_size=1)
            return self.loss(batch)

    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(Counts(), loader(n=3000, batch_size=1))  # more steps than one fold holds
    assert trainer.callback_metrics["index"].item() == sum(range(3000))
    assert trainer.callback_metrics["mean_index"].item() == pytest.approx(1499.5)


def test_torchmetrics_object_logged_on_epoch_equals_the_whole_epoch_metric():
    class Classifier(Regressor):
        def __init__(self):
            super().__init__()
            self.accuracy = torchmetrics.classification.BinaryAccuracy()
            self.predictions: list[torch.Tensor] = []
            self.targets: list[torch.Tensor] = []

        def validation_step(self, batch, batch_idx):
            x, y = batch
            predicted, target = (self(x) > 0).int().flatten(), (y > 0).int().flatten()
            self.predictions.append(predicted)
            self.targets.append(target)
            self.accuracy(predicted, target)
            self.log("val_acc", self.accuracy)

    model = Classifier()
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=0, limit_train_batches=1)
    trainer.fit(model, loader(), loader(n=50, batch_size=8, seed=3))
    expected = (torch.cat(model.predictions) == torch.cat(model.targets)).float().mean()
    torch.testing.assert_close(trainer.callback_metrics["val_acc"], expected)
    assert model.accuracy.update_count == 0, "the framework resets the metric at the epoch's end"


def test_torchmetrics_object_on_step_gives_the_batch_value():
    class StepMetric(Regressor):
        def __init__(self):
            super().__init__()
            self.mse = torchmetrics.MeanSquaredError()
            self.batch_values = []

        def training_step(self, batch, batch_idx):
            x, y = batch
            out = self(x)
            self.batch_values.append(self.mse(out.detach(), y))
            self.log("mse", self.mse, on_step=True, on_epoch=True)
            return torch.nn.functional.mse_loss(out, y)

    model = StepMetric()
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=3)
    trainer.fit(model, loader())
    torch.testing.assert_close(trainer.callback_metrics["mse_step"], model.batch_values[-1])


def test_logged_steps_follow_log_every_n_steps_and_accumulation():
    """Lightning: 12 batches, accumulation 2, n=5, 2 epochs -> steps 4, 5 (epoch end), 9, 11 (epoch end)."""
    logger = RecordingLogger()
    model = LogsValues(on_step=True, on_epoch=True)
    trainer = quiet_trainer(max_epochs=2, accumulate_grad_batches=2, log_every_n_steps=5, logger=logger)
    trainer.fit(model, loader(n=48, batch_size=4))
    assert [(step, sorted(m)) for step, m in logger.calls] == [
        (4, ["epoch", "value_step"]), (5, ["epoch", "value_epoch"]),
        (9, ["epoch", "value_step"]), (11, ["epoch", "value_epoch"]),
    ]
    assert logger.calls[0][1]["value_step"] == pytest.approx(model.values[9][0])  # the 5th optimizer step's batch
    assert logger.finalized == ["success"]


def test_validation_logs_at_the_training_step_and_standalone_runs_at_global_step():
    logger = RecordingLogger()
    model = Regressor()
    trainer = quiet_trainer(max_epochs=2, log_every_n_steps=3, logger=logger, num_sanity_val_steps=2)
    trainer.fit(model, loader(n=80), loader(n=24))
    assert logger.steps_with("train_loss") == [2, 5, 8, 11, 14, 17]
    assert logger.steps_with("val_loss") == [9, 19]
    assert logger.calls[3][1] == {"val_loss": pytest.approx(logger.calls[3][1]["val_loss"]), "epoch": 0}
    trainer.validate(model, loader(n=24), verbose=False)
    assert logger.calls[-1][0] == 20 and logger.calls[-1][1]["epoch"] == 2
    assert logger.hyperparams and logger.hyperparams[0] == {"lr": 0.05, "features": 4}


def test_manual_optimization_logs_by_batch_count():
    from tests.trainer.test_fit_loop import TwoOptimizers

    logger = RecordingLogger()
    trainer = quiet_trainer(max_epochs=2, limit_train_batches=8, log_every_n_steps=3, logger=logger)
    trainer.fit(TwoOptimizers(), loader(n=128))
    assert logger.steps_with("loss") == [2, 5, 8, 11, 14]
    assert trainer.global_step == 32


def test_metric_dicts_hold_what_lightning_holds():
    seen_in_epoch_end = []

    class Probe(Regressor):
        def training_step(self, batch, batch_idx):
            loss = self.loss(batch)
            self.log("loss", loss, on_step=True, on_epoch=True, prog_bar=True)
            self.log("hidden", loss, logger=False)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", self.loss(batch), prog_bar=True)

        def on_train_epoch_end(self):
            seen_in_epoch_end.append(sorted(self.trainer.callback_metrics))

    trainer = quiet_trainer(max_epochs=1, logger=RecordingLogger())
    trainer.fit(Probe(), loader(), loader(n=16))
    assert sorted(trainer.callback_metrics) == ["hidden", "loss", "loss_epoch", "loss_step", "val_loss"]
    assert sorted(trainer.logged_metrics) == ["loss_epoch", "loss_step", "val_loss"]
    assert sorted(trainer.progress_bar_metrics) == ["loss_epoch", "loss_step", "val_loss"]
    assert all(isinstance(v, float) for v in trainer.progress_bar_metrics.values())
    assert all(isinstance(v, torch.Tensor) for v in trainer.callback_metrics.values())
    torch.testing.assert_close(trainer.callback_metrics["loss"], trainer.callback_metrics["loss_epoch"])
    assert "loss_epoch" in seen_in_epoch_end[0]


def test_validate_and_test_return_one_dict_of_floats_per_loader(capsys):
    class Two(Regressor):
        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val_loss", self.loss(batch))
            self.log("shared", 1.0, add_dataloader_idx=False)
            self.log("not_for_loggers", 2.0, logger=False)

    trainer = quiet_trainer()
    results = trainer.validate(Two(), [loader(n=16), loader(n=24, seed=1)])
    assert [sorted(r) for r in results] == [["shared", "val_loss/dataloader_idx_0"],
                                            ["shared", "val_loss/dataloader_idx_1"]]
    assert all(isinstance(v, float) for r in results for v in r.values())
    printed = capsys.readouterr().out
    assert "Validate metric" in printed and "DataLoader 1" in printed and "val_loss/dataloader_idx_0" in printed
    assert trainer.test(Regressor(), loader(n=16), verbose=False) == [
        {"test_loss": pytest.approx(trainer.callback_metrics["test_loss"].item())}]


def test_log_in_epoch_end_hooks_defaults_to_epoch_level():
    class EpochEnd(Regressor):
        def on_train_epoch_end(self):
            self.log("epoch_value", 3.0)

    logger = RecordingLogger()
    trainer = quiet_trainer(max_epochs=1, logger=logger)
    trainer.fit(EpochEnd(), loader())
    assert logger.steps_with("epoch_value") == [7]
    assert trainer.callback_metrics["epoch_value"].item() == 3.0


@pytest.mark.parametrize("hook", ["on_train_start", "on_train_epoch_end", "on_validation_epoch_end"])
@pytest.mark.parametrize("setting", [{"on_step": True}, {"on_epoch": False}])
def test_step_level_logging_in_an_epoch_level_hook_is_refused(hook, setting):
    model = Regressor()
    setattr(model, hook, lambda: model.log("x", 1.0, **setting))
    (name, value), = setting.items()
    expected = rf"self.log\('x', ..., {name}={value}\) in an epoch-level"
    with pytest.raises(framework.MisconfigurationError, match=expected):
        quiet_trainer(max_epochs=1).fit(model, loader(16, 8), loader(16, 8))


def test_log_dict_and_step_logging_in_validation():
    class Dicts(Regressor):
        def validation_step(self, batch, batch_idx):
            loss = self.loss(batch)
            self.log_dict({"a": loss, "b": loss * 2}, on_step=True, on_epoch=True)

    logger = RecordingLogger()
    trainer = quiet_trainer(max_epochs=2, logger=logger, num_sanity_val_steps=0, limit_train_batches=2)
    trainer.fit(Dicts(), loader(), loader(n=24))
    step_calls = [(step, sorted(m)) for step, m in logger.calls if "a_step" in m]
    assert step_calls == [(i, ["a_step", "b_step"]) for i in range(6)]  # no "epoch" key, counted across epochs
    torch.testing.assert_close(trainer.callback_metrics["b_epoch"], 2 * trainer.callback_metrics["a_epoch"])


def test_epoch_end_logs_with_several_loaders_belong_to_no_loader():
    class Summary(Regressor):
        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val_loss", self.loss(batch))

        def on_validation_epoch_end(self):
            self.log("val_summary", 1.0)

    results = quiet_trainer().validate(Summary(), [loader(n=16), loader(n=16)], verbose=False)
    assert [sorted(r) for r in results] == [["val_loss/dataloader_idx_0", "val_summary"],
                                            ["val_loss/dataloader_idx_1", "val_summary"]]


def test_values_logged_at_epoch_end_survive_an_epoch_ended_by_on_train_batch_start():
    class EndsEarly(Regressor):
        def on_train_batch_start(self, batch, batch_idx):
            return -1 if batch_idx == 2 else None

        def on_train_epoch_end(self):
            self.log("epoch_stat", 5.0)

    logger = RecordingLogger()
    trainer = quiet_trainer(max_epochs=1, logger=logger)
    trainer.fit(EndsEarly(), loader())
    assert logger.steps_with("epoch_stat") == [1]
    assert trainer.callback_metrics["epoch_stat"].item() == 5.0


def test_log_in_on_train_start_is_kept():
    class StartLogs(Regressor):
        def on_train_start(self):
            self.log("at_start", 2.0)

    trainer = quiet_trainer(max_epochs=1, limit_train_batches=1)
    trainer.fit(StartLogs(), loader())
    assert trainer.callback_metrics["at_start"].item() == 2.0


def test_each_run_starts_with_empty_metric_dicts():
    seen = []

    class Peeks(Regressor):
        def on_test_epoch_end(self):
            seen.append(sorted(self.trainer.callback_metrics))

    trainer = quiet_trainer(max_epochs=1, limit_train_batches=2, logger=RecordingLogger())
    model = Peeks()
    trainer.fit(model, loader(), loader(n=16))
    trainer.test(model, loader(n=16), verbose=False)
    assert seen == [["test_loss"]]
    assert sorted(trainer.logged_metrics) == ["test_loss"]


def test_epoch_end_hooks_see_this_epochs_values_in_every_metric_dict():
    seen = []

    class Reads(framework.Callback):
        def on_train_epoch_end(self, trainer, module):
            seen.append((trainer.callback_metrics["loss"].item(), trainer.progress_bar_metrics["loss"],
                         trainer.logged_metrics["loss"].item()))

    class EpochLoss(Regressor):
        def training_step(self, batch, batch_idx):
            loss = self.loss(batch)
            self.log("loss", loss, on_step=False, on_epoch=True, prog_bar=True)
            return loss

    trainer = quiet_trainer(max_epochs=2, callbacks=[Reads()], logger=RecordingLogger())
    trainer.fit(EpochLoss(), loader())
    assert all(a == pytest.approx(b) == pytest.approx(c) for a, b, c in seen) and len(seen) == 2


def test_forked_names_with_several_loaders_keep_the_suffix_last():
    class Both(Regressor):
        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val_mse", self.loss(batch), on_step=True, on_epoch=True)

    logger = RecordingLogger()
    results = quiet_trainer(logger=logger).validate(Both(), [loader(n=24), loader(n=24)], verbose=False)
    assert [sorted(r) for r in results] == [["val_mse_epoch/dataloader_idx_0"], ["val_mse_epoch/dataloader_idx_1"]]
    step_logs = [(step, sorted(m)) for step, m in logger.calls if any("_step" in k for k in m)]
    assert step_logs == [(i, ["val_mse_step/dataloader_idx_0"]) for i in range(3)] + \
        [(i, ["val_mse_step/dataloader_idx_1"]) for i in range(3)]


def test_datamodule_hyperparameters_are_logged_with_the_modules():
    class Data(framework.DataModule):
        def __init__(self, batch_size=8):
            super().__init__()
            self.save_hyperparameters()

        def train_dataloader(self):
            return loader(batch_size=self.hparams.batch_size)

    logger = RecordingLogger()
    quiet_trainer(max_epochs=1, limit_train_batches=1, logger=logger).fit(Regressor(), datamodule=Data())
    assert logger.hyperparams == [{"lr": 0.05, "features": 4, "batch_size": 8}]


def test_every_step_is_logged_while_should_stop_waits_for_min_epochs():
    class StopsEarly(Regressor):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            if self.current_epoch == 1:
                self.trainer.should_stop = True

    logger = RecordingLogger()
    trainer = quiet_trainer(max_epochs=5, min_epochs=3, log_every_n_steps=4, logger=logger)
    trainer.fit(StopsEarly(), loader())
    assert logger.steps_with("train_loss") == [3, 7, *range(8, 24)]
    assert trainer.current_epoch == 3


def test_logged_python_numbers_are_kept_as_float_tensors():
    class Numbers(Regressor):
        def training_step(self, batch, batch_idx):
            self.log("int_value", batch_idx)
            self.log_dict({"float_value": 0.5, "flag": True})
            return self.loss(batch)

    trainer = quiet_trainer(max_epochs=1, limit_train_batches=3, logger=RecordingLogger(), log_every_n_steps=1)
    trainer.fit(Numbers(), loader())
    for name, expected in (("int_value", 2.0), ("float_value", 0.5), ("flag", 1.0)):
        for metrics in (trainer.callback_metrics, trainer.logged_metrics):
            value = metrics[name]
            assert isinstance(value, torch.Tensor) and value.dtype == torch.float32 and value.item() == expected
    assert trainer.loggers[0].calls[-1][1]["int_value"] == 2.0  # loggers still get floats


def test_one_name_logged_with_other_settings_in_the_same_phase_is_refused():
    class Changes(Regressor):
        def training_step(self, batch, batch_idx):
            self.log("value", 1.0, prog_bar=batch_idx == 1)
            return self.loss(batch)

    with pytest.raises(framework.MisconfigurationError,
                       match=r"self\.log\('value', \.\.\.\) was called again with other settings: prog_bar=True "
                             r"\(first False\)"):
        quiet_trainer(max_epochs=1, limit_train_batches=2).fit(Changes(), loader())


def test_one_name_logged_per_step_and_again_at_the_epoch_end_keeps_both():
    # A common pattern: a per-step value in training_step, the epoch's value under the same name in
    # on_train_epoch_end; as in Lightning, the loggers get both and the epoch value is the latest.
    class StepAndEpoch(Regressor):
        def training_step(self, batch, batch_idx):
            self.log("accuracy", float(batch_idx))
            return self.loss(batch)

        def on_train_epoch_end(self):
            self.log("accuracy", 100.0)

    logger = RecordingLogger()
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=4, logger=logger, log_every_n_steps=2)
    trainer.fit(StepAndEpoch(), loader())
    assert [(step, metrics["accuracy"]) for step, metrics in logger.calls if "accuracy" in metrics] == [
        (1, 1.0), (3, 3.0), (3, 100.0)]
    assert trainer.callback_metrics["accuracy"].item() == 100.0


def test_evaluation_step_values_reach_loggers_and_the_bar_but_not_callback_metrics():
    seen_in_batch_end = []

    class EvalSteps(Regressor):
        def validation_step(self, batch, batch_idx):
            self.log("val_step_value", float(batch_idx), on_step=True, on_epoch=False, prog_bar=True)
            self.log("val_loss", self.loss(batch))

        def on_validation_batch_end(self, outputs, batch, batch_idx):
            seen_in_batch_end.append(self.trainer.logged_metrics["val_step_value"].item())

    for logger in (False, RecordingLogger()):
        seen_in_batch_end.clear()
        trainer = quiet_trainer(logger=logger, limit_val_batches=3)
        trainer.validate(EvalSteps(), loader(), verbose=False)
        assert seen_in_batch_end == [0.0, 1.0, 2.0]  # the running batch's value, not the previous one's
        assert "val_step_value" not in trainer.callback_metrics and "val_loss" in trainer.callback_metrics
        assert trainer.logged_metrics["val_step_value"].item() == 2.0
        assert trainer.progress_bar_metrics["val_step_value"] == 2.0


def test_the_sanity_check_values_are_visible_in_its_validation_end_and_forgotten_after():
    seen = []

    class Watches(framework.Callback):
        def on_validation_end(self, trainer, module):
            seen.append((trainer.sanity_checking, sorted(trainer.callback_metrics), sorted(trainer.logged_metrics)))

    logger = RecordingLogger()
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1, logger=logger,
                            callbacks=[Watches()], log_every_n_steps=1)
    trainer.fit(Regressor(), loader(), loader())
    assert seen[0] == (True, ["val_loss"], ["val_loss"])
    assert seen[1] == (False, ["train_loss", "val_loss"], ["train_loss", "val_loss"])
    assert [step for step, metrics in logger.calls if "val_loss" in metrics] == [0]  # the sanity value was not sent


def test_the_same_settings_spelled_differently_are_accepted():
    class Spellings(Regressor):
        def training_step(self, batch, batch_idx):
            loss = self.loss(batch)
            first = batch_idx == 0
            self.log("mean_value", loss, reduce_fx="mean" if first else "Mean", on_epoch=True)
            self.log("avg_value", loss, reduce_fx="avg" if first else torch.mean, on_epoch=True)
            self.log("max_value", loss, reduce_fx=lambda values: values.max(), on_epoch=True)  # a new lambda each call
            self.log("shown", loss, logger=True if first else None)
            return loss

        def on_train_batch_end(self, outputs, batch, batch_idx):
            self.log("shown", outputs["loss"], on_step=True, on_epoch=False)  # training_step's defaults, spelled out

    trainer = quiet_trainer(max_epochs=1, limit_train_batches=3)
    trainer.fit(Spellings(), loader())
    assert {"mean_value_epoch", "avg_value_epoch", "max_value_epoch", "shown"} <= set(trainer.callback_metrics)


class LogsACollection(Regressor):
    def __init__(self):
        super().__init__()
        self.errors = torchmetrics.MetricCollection(
            {"mse": torchmetrics.MeanSquaredError(), "mae": torchmetrics.MeanAbsoluteError()}, prefix="val_")

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.errors.update(self(x), y)
        self.log_dict(self.errors)


def test_log_dict_takes_a_metric_collection_and_logs_each_metric_by_its_name():
    model = LogsACollection()
    data = _uneven_loader()
    results = quiet_trainer().validate(model, data, verbose=False)[0]
    x, y = data.dataset.tensors
    with torch.no_grad():
        predicted = model(x)
    assert results == pytest.approx({"val_mse": float(((predicted - y) ** 2).mean()),
                                     "val_mae": float((predicted - y).abs().mean())})
    with pytest.raises(framework.MisconfigurationError, match="needs a mapping or a torchmetrics MetricCollection"):
        model.log_dict([("a", 1.0)])


class _EveryRankLogger(RecordingLogger):
    """A logger of the user's own whose log_metrics is not rank_zero_only: every rank's values reach it."""


class _RankZeroLogger(RecordingLogger):
    @rank_zero_only
    def log_metrics(self, metrics, step):
        super().log_metrics(metrics, step)


class _LogsItsRank(Regressor):
    def on_train_start(self):
        self.log(f"rank-{self.global_rank}", 1.0)


def _log_on_rank(rank: int) -> tuple[list, list]:
    every, zero = _EveryRankLogger(), _RankZeroLogger()
    quiet_trainer(devices=2, strategy="ddp", max_steps=1, logger=[every, zero], log_every_n_steps=1).fit(
        _LogsItsRank(), loader())
    return sorted({key for _, metrics in every.calls for key in metrics}), zero.calls


def test_a_logger_that_is_not_rank_zero_only_hears_every_rank_as_in_lightning():
    (zero_keys, zero_calls), (one_keys, one_calls) = spawn(2, _log_on_rank)
    assert "rank-0" in zero_keys and "rank-1" in one_keys and "rank-1" not in zero_keys
    assert zero_calls and one_calls == []  # rank_zero_only: rank 0 alone


def test_logging_to_a_logger_with_none_configured_warns_as_in_lightning():
    class AsksForALogger(Regressor):
        def training_step(self, batch, batch_idx):
            self.log("epoch", -1.0, logger=True)
            return super().training_step(batch, batch_idx)

    trainer = quiet_trainer(max_steps=1)
    with pytest.warns(UserWarning, match=r"self.log\('epoch', ..., logger=True\)` but have no logger configured"):
        trainer.fit(AsksForALogger(), loader())
    assert trainer.logged_metrics["epoch"] == -1.0  # still logged, as in Lightning


def test_values_logged_in_training_step_stay_in_callback_metrics_through_validation(tmp_path):
    seen = []

    class Watches(framework.Callback):
        def on_validation_start(self, trainer, module):
            seen.append("train_loss" in trainer.callback_metrics)

        def on_validation_end(self, trainer, module):
            seen.append("train_loss" in trainer.callback_metrics)

    checkpoint = framework.callbacks.ModelCheckpoint(dirpath=tmp_path, monitor="train_loss", save_top_k=2)
    trainer = quiet_trainer(max_epochs=1, val_check_interval=0.25, num_sanity_val_steps=0,
                            callbacks=[Watches(), checkpoint], enable_checkpointing=True)
    trainer.fit(Regressor(), loader(n=64), loader(n=16))  # 8 batches: validation after 2, 4, 6 and 8
    assert seen == [True] * 8 and checkpoint.best_model_path  # monitored mid-epoch, as in Lightning


@pytest.mark.parametrize("compute_groups", [True, False])
def test_a_metric_collection_shares_its_states_only_where_it_computes_in_groups_as_in_lightning(compute_groups):
    asked = []

    class Recording(torchmetrics.MetricCollection):
        def items(self, keep_base=False, copy_state=True):
            asked.append((keep_base, copy_state))
            return super().items(keep_base=keep_base, copy_state=copy_state)

    class LogsGroups(Regressor):
        def __init__(self):
            super().__init__()
            self.errors = Recording([torchmetrics.MeanSquaredError(), torchmetrics.MeanAbsoluteError()],
                                    compute_groups=compute_groups)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.errors.update(self(x), y)
            self.log_dict(self.errors)

    quiet_trainer().validate(LogsGroups(), loader(n=16), verbose=False)
    assert asked and all(call == (False, not compute_groups) for call in asked)
