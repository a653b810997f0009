"""Every hook of a Module and a Callback is called in the documented order (framework/hooks.py)."""

from __future__ import annotations

import pytest
import torch

import framework
from framework.errors import MisconfigurationError
from framework.hooks import Hook
from tests.helpers import Regressor, loader, quiet_trainer

CALLS: list[str] = []


def _recorder(prefix: str, name: str, original):
    def record(*args, **kwargs):
        CALLS.append(f"{prefix}:{name}")
        return original(*args, **kwargs)

    return record


class RecordingCallback(framework.Callback):
    pass


class RecordingModule(Regressor):
    pass


# Override every hook on both classes with a recorder that then runs the base behaviour.
for hook in Hook:
    if hook.for_callbacks:
        setattr(RecordingCallback, hook.value, _recorder("cb", hook.value, getattr(framework.Callback, hook.value)))
    if hook.for_module:
        setattr(RecordingModule, hook.value, _recorder("m", hook.value, getattr(Regressor, hook.value)))
for step in ("training_step", "validation_step", "test_step", "predict_step"):
    setattr(RecordingModule, step, _recorder("m", step, getattr(Regressor, step)))


def _transfer() -> list[str]:
    return ["m:on_before_batch_transfer", "m:transfer_batch_to_device", "m:on_after_batch_transfer"]


def _both(name: str) -> list[str]:
    return [f"cb:{name}", f"m:{name}"]


def _eval_loop(stage: str, step: str, batches: int, train_hook: bool = True) -> list[str]:
    calls = [f"m:on_{stage}_model_eval", *_both(f"on_{stage}_start"), *_both(f"on_{stage}_epoch_start")]
    for _ in range(batches):
        calls += [*_transfer(), *_both(f"on_{stage}_batch_start"), f"m:{step}", *_both(f"on_{stage}_batch_end")]
    calls += [*_both(f"on_{stage}_epoch_end"), *_both(f"on_{stage}_end")]
    if train_hook:
        calls.append(f"m:on_{stage}_model_train")
    return calls


def _train_batch() -> list[str]:
    return [
        *_transfer(), *_both("on_train_batch_start"),
        "m:optimizer_step", "m:training_step", *_both("on_before_zero_grad"), "m:optimizer_zero_grad",
        *_both("on_before_backward"), "m:backward", *_both("on_after_backward"), *_both("on_before_optimizer_step"),
        "m:configure_gradient_clipping", *_both("on_train_batch_end"),
    ]


def _setup(stage: str) -> list[str]:
    return ["m:configure_callbacks", "m:prepare_data", *_both("setup"), "m:configure_model"]


def _run(action) -> list[str]:
    CALLS.clear()
    action()
    return list(CALLS)


def test_fit_calls_every_hook_in_the_documented_order():
    model = RecordingModule()
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=1,
                            callbacks=[RecordingCallback()])
    calls = _run(lambda: trainer.fit(model, loader(), loader()))
    expected = [
        *_setup("fit"), "m:configure_optimizers", *_both("on_fit_start"),
        "cb:on_sanity_check_start", *_eval_loop("validation", "validation_step", 1), "cb:on_sanity_check_end",
        *_both("on_train_start"), *_both("on_train_epoch_start"),
        *_train_batch(), *_train_batch(),
        "m:on_validation_model_zero_grad", *_eval_loop("validation", "validation_step", 1),
        *_both("on_train_epoch_end"), *_both("on_train_end"), *_both("on_fit_end"), *_both("teardown"),
    ]
    assert calls == expected


def test_loaders_are_asked_for_when_first_needed_as_in_lightning():
    class WithLoaders(RecordingModule):
        def train_dataloader(self):
            CALLS.append("m:train_dataloader")
            return loader()

        def val_dataloader(self):
            CALLS.append("m:val_dataloader")
            return loader()

    trainer = quiet_trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1, num_sanity_val_steps=1)
    calls = [c for c in _run(lambda: trainer.fit(WithLoaders())) if "dataloader" in c or "sanity" in c or
             c in ("m:configure_optimizers", "m:on_fit_start", "m:on_train_start", "m:validation_step")]
    assert calls == [
        "m:configure_optimizers", "m:on_fit_start", "m:val_dataloader", "m:validation_step", "m:train_dataloader",
        "m:on_train_start", "m:validation_step",
    ]


def test_estimated_stepping_batches_in_configure_optimizers_asks_for_the_train_loader_early():
    class Early(RecordingModule):
        def train_dataloader(self):
            CALLS.append("m:train_dataloader")
            return loader()

        def configure_optimizers(self):
            CALLS.append(f"steps={self.trainer.estimated_stepping_batches}")
            return super().configure_optimizers()

    trainer = quiet_trainer(max_epochs=2, num_sanity_val_steps=0)
    calls = [c for c in _run(lambda: trainer.fit(Early())) if "dataloader" in c or "steps=" in c]
    assert calls == ["m:train_dataloader", "steps=16"]  # asked once, early: 8 batches x 2 epochs


def test_validate_test_and_predict_call_their_hooks_in_order():
    model = RecordingModule()
    trainer = quiet_trainer(limit_val_batches=1, limit_test_batches=1, limit_predict_batches=1,
                            callbacks=[RecordingCallback()])
    assert _run(lambda: trainer.validate(model, loader(), verbose=False)) == [
        *_setup("validate"), *_eval_loop("validation", "validation_step", 1), *_both("teardown")]
    assert _run(lambda: trainer.test(model, loader(), verbose=False)) == [
        *_setup("test"), *_eval_loop("test", "test_step", 1), *_both("teardown")]
    assert _run(lambda: trainer.predict(model, loader())) == [
        *_setup("predict"), *_eval_loop("predict", "predict_step", 1, train_hook=False), *_both("teardown")]


def test_epoch_schedulers_step_after_the_last_batch_and_accumulation_steps_once():
    class WithScheduler(RecordingModule):
        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, 1)]

    model = WithScheduler()
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=4, accumulate_grad_batches=2, num_sanity_val_steps=0,
                            limit_val_batches=0)
    calls = _run(lambda: trainer.fit(model, loader()))
    assert calls.count("m:training_step") == 4
    assert calls.count("m:optimizer_step") == 2
    assert calls.count("m:on_before_optimizer_step") == 2
    assert calls.count("m:lr_scheduler_step") == 1
    last_batch_end = len(calls) - 1 - calls[::-1].index("m:on_train_batch_end")
    assert calls.index("m:lr_scheduler_step") < last_batch_end


def test_hooks_that_nobody_overrides_are_resolved_to_none():
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=1)
    trainer.fit(Regressor(), loader())
    assert trainer.hooks.get(Hook.ON_TRAIN_BATCH_END) is None
    assert trainer.hooks.get(Hook.ON_BEFORE_BACKWARD) is None
    assert trainer.hooks.get(Hook.TRANSFER_BATCH_TO_DEVICE) is not None  # its default moves the batch


def test_epoch_end_callbacks_that_read_metrics_run_after_the_module():
    order = []

    class Reader(framework.Callback):
        reads_epoch_metrics = True

        def on_train_epoch_end(self, trainer, module):
            order.append(("reader", "late" in trainer.callback_metrics))

    class Plain(framework.Callback):
        def on_train_epoch_end(self, trainer, module):
            order.append(("plain", "late" in trainer.callback_metrics))

    class Late(Regressor):
        def on_train_epoch_end(self):
            order.append(("module", None))
            self.log("late", 1.0)

    trainer = quiet_trainer(max_epochs=1, limit_train_batches=2, callbacks=[Reader(), Plain()])
    trainer.fit(Late(), loader())
    assert order == [("plain", False), ("module", None), ("reader", True)]


def test_configure_callbacks_replace_trainer_callbacks_of_the_same_type_and_checkpointers_go_last():
    class Saver(framework.Callback):
        runs_last = True

    class Other(framework.Callback):
        def __init__(self, tag):
            self.tag = tag

    given, saver = Other("trainer"), Saver()

    class WithCallbacks(Regressor):
        def configure_callbacks(self):
            return [Other("module")]

    trainer = quiet_trainer(max_epochs=1, limit_train_batches=1, callbacks=[saver, given])
    trainer.fit(WithCallbacks(), loader())
    assert [type(cb).__name__ for cb in trainer.callbacks] == ["Other", "Saver"]
    assert trainer.callbacks[0].tag == "module"
    assert trainer.checkpoint_callback is saver


# -- where self.log may be called (Lightning's table) ---

class LogsIn(framework.Module):
    """Logs once in ``hook`` (a Module hook, or a step), as Lightning users do."""

    def __init__(self, hook: str) -> None:
        super().__init__()
        self.hook = hook
        self.net = torch.nn.Linear(4, 1)

    def _maybe_log(self, hook: str) -> None:
        if hook == self.hook:
            self.log(f"in_{hook}", 1.0, on_step=False, on_epoch=True)

    def training_step(self, batch, batch_idx):
        self._maybe_log("training_step")
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def predict_step(self, batch, batch_idx):
        self._maybe_log("predict_step")
        return self.net(batch[0])

    def configure_optimizers(self):
        self._maybe_log("configure_optimizers")
        return torch.optim.SGD(self.parameters(), lr=0.1)


for _hook in ("setup", "on_fit_start", "on_train_start", "on_train_epoch_start", "on_train_end",
              "on_before_batch_transfer", "on_before_backward", "on_train_epoch_end"):
    def _logging_hook(self, *args, _hook=_hook, **kwargs):
        self._maybe_log(_hook)
        return args[0] if _hook == "on_before_batch_transfer" else None
    setattr(LogsIn, _hook, _logging_hook)


@pytest.mark.parametrize("hook", ["training_step", "on_train_start", "on_train_epoch_start", "on_before_backward",
                                  "on_train_epoch_end"])
def test_self_log_works_in_the_hooks_lightning_allows(hook):
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(LogsIn(hook), loader())
    assert f"in_{hook}" in trainer.callback_metrics


@pytest.mark.parametrize("hook", ["setup", "on_fit_start", "on_train_end", "on_before_batch_transfer",
                                  "configure_optimizers", "predict_step"])
def test_self_log_is_refused_in_the_hooks_lightning_refuses_it_in(hook):
    trainer = quiet_trainer(max_epochs=1)
    run = trainer.predict if hook == "predict_step" else trainer.fit
    with pytest.raises(MisconfigurationError, match=rf"self.log\('in_{hook}', ...\) (inside {hook}|outside)"):
        run(LogsIn(hook), loader())


def test_self_log_is_refused_where_checkpoints_are_assembled_and_schedulers_step_as_in_lightning(tmp_path):
    class LogsWhileSaving(Regressor):
        def on_save_checkpoint(self, checkpoint):
            self.log("x", 1.0)

    class CallbackLogsWhileSaving(framework.Callback):
        def on_save_checkpoint(self, trainer, module, checkpoint):
            module.log("x", 1.0)

    class LogsWhileStepping(Regressor):
        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, 1)]

        def lr_scheduler_step(self, scheduler, metric):
            self.log("x", 1.0)

    for model, callbacks, hook in ((LogsWhileSaving(), [], "on_save_checkpoint"),
                                   (Regressor(), [CallbackLogsWhileSaving()], "Callback.on_save_checkpoint")):
        trainer = quiet_trainer(max_steps=1, callbacks=callbacks)
        trainer.fit(model, loader())
        with pytest.raises(MisconfigurationError, match=rf"self.log\('x', ...\) inside {hook}"):
            trainer.save_checkpoint(tmp_path / "a.ckpt")
    with pytest.raises(MisconfigurationError, match=r"self.log\('x', ...\) inside lr_scheduler_step"):
        quiet_trainer(max_epochs=1).fit(LogsWhileStepping(), loader())


class LogsFromACallback(framework.Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        module.log("from_callback", 2.0)

    def on_fit_start(self, trainer, module):
        if trainer.max_epochs == 2:
            module.log("too_early", 1.0)


def test_a_callback_logs_through_the_module_where_the_module_may_log():
    trainer = quiet_trainer(max_epochs=1, callbacks=[LogsFromACallback()])
    trainer.fit(Regressor(), loader())
    assert trainer.callback_metrics["from_callback"] == 2.0
    with pytest.raises(MisconfigurationError, match=r"self.log\('too_early', ...\) inside Callback.on_fit_start"):
        quiet_trainer(max_epochs=2, callbacks=[LogsFromACallback()]).fit(Regressor(), loader())


def test_callback_hooks_name_their_arguments_as_lightning_so_keyword_calls_work(tmp_path):
    import inspect

    import framework.callbacks as callbacks
    from framework.cli.save_config import SaveConfig

    classes = [getattr(callbacks, name) for name in callbacks.__all__ if name != "EarlyStoppingReason"] + [SaveConfig]
    for cls in classes:
        for hook in Hook:
            method = getattr(cls, hook.value, None)
            if not hook.for_callbacks or method is None:
                continue
            parameters = list(inspect.signature(method).parameters)
            assert parameters[1:3] == ["trainer", "pl_module"], f"{cls.__name__}.{hook.value}{parameters}"

    timer = callbacks.Timer(duration="00:00:01:00")
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(Regressor(), loader())
    timer.on_train_start(trainer=trainer, pl_module=trainer.lightning_module)  # as Lightning's tests call it
    assert timer.time_remaining("train") <= 60


def test_each_run_starts_without_the_gradients_left_before_it_as_in_lightning():
    model = Regressor()
    model.loss(next(iter(loader()))).backward()
    assert all(p.grad is not None for p in model.parameters())
    quiet_trainer().validate(model, loader(), verbose=False)
    assert all(p.grad is None for p in model.parameters())  # freed, as Lightning's zero_grad at a run's start


def test_hooks_get_lightnings_arguments_and_validation_inside_fit_frees_the_gradients():
    seen = []

    class Watches(Regressor):
        def zero_grad(self, *args, **kwargs):
            seen.append(("zero_grad", args, kwargs))
            super().zero_grad(*args, **kwargs)

        def configure_gradient_clipping(self, optimizer, *args, **kwargs):
            seen.append(("configure_gradient_clipping", args, sorted(kwargs)))
            super().configure_gradient_clipping(optimizer, *args, **kwargs)

        def clip_gradients(self, optimizer, *args, **kwargs):
            seen.append(("clip_gradients", args, sorted(kwargs)))

        def on_train_batch_end(self, outputs, batch, batch_idx):
            seen.append(("grads at batch end", all(p.grad is not None for p in self.parameters())))

        def on_validation_start(self):
            seen.append(("grads at validation", [p.grad for p in self.parameters()]))

    quiet_trainer(max_steps=1, limit_val_batches=1, num_sanity_val_steps=0, val_check_interval=1).fit(
        Watches(), loader(), loader())
    assert seen[0] == ("zero_grad", (), {})  # as Lightning, model.zero_grad() without set_to_none
    keywords = ["gradient_clip_algorithm", "gradient_clip_val"]
    assert ("configure_gradient_clipping", (), keywords) in seen and ("clip_gradients", (), keywords) in seen
    assert ("grads at batch end", True) in seen  # zeroed at the next window's start, as in Lightning
    assert ("grads at validation", [None, None]) in seen  # on_validation_model_zero_grad's default


class LogsWithItsOwnLog(framework.Callback):
    def on_train_start(self, trainer, module):
        self.log("on_train_start", 1.0)

    def on_train_epoch_start(self, trainer, module):
        self.log("on_train_epoch_start", 2.0)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.log_dict({"on_train_batch_end": 3.0})

    def on_train_epoch_end(self, trainer, module):
        self.log("on_train_epoch_end", 5.0)


def test_a_callback_logs_with_self_log_in_its_hooks_as_in_lightning():
    trainer = quiet_trainer(max_epochs=1, callbacks=[LogsWithItsOwnLog()])
    trainer.fit(Regressor(), loader())
    assert {name: value.item() for name, value in trainer.callback_metrics.items() if name.startswith("on_")} == {
        "on_train_start": 1.0, "on_train_epoch_start": 2.0, "on_train_batch_end": 3.0, "on_train_epoch_end": 5.0}

    class KeepsItsOwn(framework.Callback):
        def log(self, message):
            return f"own {message}"

    own = KeepsItsOwn()
    quiet_trainer(max_steps=1, callbacks=[own]).fit(Regressor(), loader())
    assert own.log("x") == "own x"


def test_logging_with_neither_step_nor_epoch_is_refused_as_not_useful():
    class LogsNowhere(Regressor):
        def training_step(self, batch, batch_idx):
            self.log("nowhere", 1.0, on_step=False, on_epoch=False)
            return super().training_step(batch, batch_idx)

    with pytest.raises(MisconfigurationError, match=r"on_step=False, on_epoch=False\) is not useful"):
        quiet_trainer(max_steps=1).fit(LogsNowhere(), loader())


def test_setup_and_teardown_get_the_trainer_fn_as_in_lightning():
    stages = []

    class Records(Regressor):
        def setup(self, stage):
            stages.append((stage, stage.value))

        def teardown(self, stage):
            stages.append((stage, stage.value))

    trainer = quiet_trainer(max_steps=1)
    trainer.fit(Records(), loader())
    trainer.test(Records(), loader(), verbose=False)
    assert stages == [("fit", "fit")] * 2 + [("test", "test")] * 2  # a str enum: == "fit", and has .value
