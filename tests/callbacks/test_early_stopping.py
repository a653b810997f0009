"""EarlyStopping on known metric sequences: patience, min_delta, thresholds, finiteness, state."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from framework.callbacks import EarlyStopping, EarlyStoppingReason
from framework.errors import MisconfigurationError
from tests.callbacks.test_model_checkpoint import Scripted
from tests.helpers import loader, quiet_trainer


def run(scores, stopper, **kwargs):
    settings = dict(max_epochs=len(scores), limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0)
    settings.update(kwargs)
    trainer = quiet_trainer(callbacks=[stopper], **settings)
    trainer.fit(Scripted(scores), loader(), loader(n=8))
    return trainer


@pytest.mark.parametrize(("scores", "patience", "epochs_run"), [
    ([5, 4, 4.5, 4.2, 4.1, 3], 2, 4),   # best 4 at epoch 1; epochs 2 and 3 do not beat it -> stop after epoch 3
    ([5, 4, 4.5, 4.2, 4.1, 3], 3, 5),
    ([5, 4, 3, 2, 1, 0], 1, 6),          # always improving: never stops
    ([5, 5, 5, 5], 0, 2),                # patience 0: the first non-improvement stops
])
def test_patience_on_a_known_sequence(scores, patience, epochs_run):
    stopper = EarlyStopping(monitor="score", patience=patience)
    trainer = run(scores, stopper)
    assert trainer.current_epoch == epochs_run  # epochs that ran, as Lightning counts them
    if epochs_run < len(scores):
        assert stopper.stopped_epoch == epochs_run - 1 and "did not improve" in stopper.stopping_reason_message
        assert stopper.stopping_reason is EarlyStoppingReason.PATIENCE_EXHAUSTED
    else:
        assert stopper.stopping_reason is EarlyStoppingReason.NOT_STOPPED and stopper.stopping_reason_message is None


def test_min_delta_ignores_improvements_smaller_than_it():
    stopper = EarlyStopping(monitor="score", patience=2, min_delta=0.5)
    trainer = run([5, 4.8, 4.6, 4.4, 3], stopper)  # 0.2 steps are not improvements of 0.5
    assert trainer.current_epoch == 3 and stopper.best_score.item() == 5


def test_a_negative_min_delta_counts_a_slightly_worse_value_as_improving():
    stopper = EarlyStopping(monitor="score", patience=1, min_delta=-0.5)
    trainer = run([5, 5.4, 5.8, 6.5, 7], stopper)  # within 0.5 of the best counts; 6.5 is 0.7 worse than 5.8
    assert trainer.current_epoch == 4 and stopper.best_score.item() == pytest.approx(5.8)


def test_mode_max():
    trainer = run([1, 2, 1.5, 1.7, 3], EarlyStopping(monitor="score", mode="max", patience=2))
    assert trainer.current_epoch == 4


def test_stopping_threshold_stops_once_reached():
    stopper = EarlyStopping(monitor="score", stopping_threshold=2.5, patience=10)
    trainer = run([5, 4, 3, 2, 1], stopper)
    assert trainer.current_epoch == 4
    assert stopper.stopping_reason_message.startswith("Stopping threshold reached: score = 2.0 < 2.5")
    assert stopper.stopping_reason is EarlyStoppingReason.STOPPING_THRESHOLD


def test_divergence_threshold_stops_once_passed():
    stopper = EarlyStopping(monitor="score", divergence_threshold=10, patience=10)
    trainer = run([5, 4, 12, 3], stopper)
    assert trainer.current_epoch == 3 and stopper.stopping_reason_message.startswith("Divergence threshold reached")
    assert stopper.stopping_reason is EarlyStoppingReason.DIVERGENCE_THRESHOLD


def test_a_non_finite_value_stops_unless_asked_not_to():
    assert run([3, math.nan, 2, 1], EarlyStopping(monitor="score", patience=5)).current_epoch == 2
    assert run([3, math.inf, 2, 1], EarlyStopping(monitor="score", patience=5, check_finite=False)).current_epoch == 4


def test_min_epochs_is_respected():
    trainer = run([5, 6, 7, 8, 9, 10], EarlyStopping(monitor="score", patience=1), min_epochs=4)
    assert trainer.current_epoch == 4


def test_it_says_why_it_stopped(caplog):
    with caplog.at_level("INFO", logger="framework"):
        run([1, 2, 3], EarlyStopping(monitor="score", patience=1))
    assert "Monitored metric score did not improve in the last 1 records. Best score: 1.000. Signaling Trainer to " \
           "stop." in [r.getMessage() for r in caplog.records]


def test_an_unknown_monitor_with_strict_names_the_logged_metrics():
    with pytest.raises(MisconfigurationError, match=r"monitor='val_acc'\) found no 'val_acc' in the logged metrics: "
                                                     r"\['score', 'train_loss'\]"):
        run([1, 2], EarlyStopping(monitor="val_acc"))
    assert run([1, 2], EarlyStopping(monitor="val_acc", strict=False)).current_epoch == 2


def test_checks_after_each_validation_when_validation_runs_inside_the_epoch():
    checks = []

    class Counts(EarlyStopping):
        def _run_early_stopping_check(self, trainer):  # the step Lightning users override
            checks.append(trainer.global_step)
            super()._run_early_stopping_check(trainer)

    run([1, 1, 1], Counts(monitor="score", patience=10), val_check_interval=0.5, limit_train_batches=4)
    assert checks == [2, 4, 6, 8, 10, 12]
    checks.clear()
    run([1, 1, 1], Counts(monitor="score", patience=10))
    assert checks == [2, 4, 6]  # once, at each training epoch's end


def test_state_dict_round_trip_and_resume_keep_counting(tmp_path):
    stopper = EarlyStopping(monitor="score", patience=3)
    trainer = run([5, 4, 6, 7], stopper)  # best 4, then two epochs without improvement
    assert (stopper.wait_count, stopper.best_score.item()) == (2, 4)
    again = EarlyStopping(monitor="score", patience=3)
    again.load_state_dict(stopper.state_dict())
    assert again.state_dict() == stopper.state_dict()
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    resumed = EarlyStopping(monitor="score", patience=3)
    trainer = quiet_trainer(max_epochs=8, callbacks=[resumed], limit_train_batches=2, limit_val_batches=1,
                            num_sanity_val_steps=0)
    trainer.fit(Scripted([5, 4, 6, 7, 8, 8, 8, 8]), loader(), loader(n=8), ckpt_path=tmp_path / "a.ckpt")
    assert trainer.current_epoch == 5 and resumed.wait_count == 3  # one more bad epoch was enough


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mode": "avg"}, r"mode='avg' \(type str\)\): accepted 'min' or 'max'"),
    ({"patience": -1}, r"patience=-1 \(type int\)\): accepted is an int >= 0"),
    ({"monitor": ""}, r"monitor='' \(type str\)\): accepted is a logged name"),
])
def test_bad_arguments_name_the_argument(kwargs, message):
    with pytest.raises(MisconfigurationError, match=message):
        EarlyStopping(**{"monitor": "score", **kwargs})


def test_two_early_stoppings_on_different_metrics_keep_separate_state():
    assert EarlyStopping("a").state_key != EarlyStopping("b").state_key
    assert EarlyStopping("a").state_key == "EarlyStopping{'monitor': 'a', 'mode': 'min'}"
    assert torch.equal(EarlyStopping("a", mode="max").best_score, torch.tensor(-math.inf))


def test_a_subclass_overriding_evaluate_stopping_criteria_decides_as_in_lightning():
    class StopsAtTwo(EarlyStopping):
        def _evaluate_stopping_criteria(self, current):
            return current.item() >= 2, f"score {current.item()} reached 2"

    stopper = StopsAtTwo(monitor="score")
    trainer = run([0, 1, 2, 3, 4], stopper)
    assert trainer.current_epoch == 3 and stopper.stopped_epoch == 2
    assert stopper.stopping_reason_message == "score 2.0 reached 2"


def test_a_value_set_in_callback_metrics_is_what_the_check_reads_as_in_lightning_tests():
    trainer = quiet_trainer(max_epochs=1)
    trainer.callback_metrics["score"] = torch.tensor([[[3.0]]])
    assert trainer.callback_metrics["score"].item() == 3.0  # kept, not lost with the view
    trainer.callback_metrics.update(other=1.0)
    assert trainer.callback_metrics["other"] == 1.0
    stopper = EarlyStopping(monitor="score", patience=0)
    stopper._run_early_stopping_check(trainer)
    assert stopper.best_score.item() == 3.0 and not trainer.should_stop


def test_resuming_with_another_monitor_warns_that_the_state_starts_afresh(tmp_path):
    stopper = EarlyStopping(monitor="score", patience=3)
    trainer = run([5, 6], stopper)
    trainer.save_checkpoint(tmp_path / "two.ckpt")
    changed = EarlyStopping(monitor="score", mode="max", patience=3)
    expected = (r"holds the state of EarlyStopping\{'monitor': 'score', 'mode': 'min'\}, but this run's callback is "
                r"EarlyStopping\{'monitor': 'score', 'mode': 'max'\}: its settings changed, so it starts afresh")
    with pytest.warns(UserWarning, match=expected):
        quiet_trainer(callbacks=[changed], max_epochs=3, limit_train_batches=2, limit_val_batches=1,
                      num_sanity_val_steps=0).fit(Scripted([5, 6, 7]), loader(), loader(n=8),
                                                  ckpt_path=tmp_path / "two.ckpt")
    assert changed.wait_count == 0  # not the checkpoint's 1
    same = EarlyStopping(monitor="score", patience=3)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*starts afresh")
        quiet_trainer(callbacks=[same], max_epochs=3, limit_train_batches=2, limit_val_batches=1,
                      num_sanity_val_steps=0).fit(Scripted([5, 6, 7]), loader(), loader(n=8),
                                                  ckpt_path=tmp_path / "two.ckpt")
    assert same.wait_count == 2  # the checkpoint's 1, then one more epoch without improving
