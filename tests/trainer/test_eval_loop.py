"""The evaluation loops: gradient mode inside and outside fit, and what they do with the step methods."""

from __future__ import annotations

import pytest
import torch

from framework.errors import MisconfigurationError
from tests.helpers import Regressor, loader, quiet_trainer


class GradModes(Regressor):
    """Records the grad/inference mode of every validation_step."""

    def __init__(self):
        super().__init__()
        self.modes: list[tuple[bool, bool]] = []

    def validation_step(self, batch, batch_idx):
        self.modes.append((torch.is_grad_enabled(), torch.is_inference_mode_enabled()))
        return super().validation_step(batch, batch_idx)


def test_validation_inside_fit_runs_under_no_grad_and_standalone_under_inference_mode():
    model = GradModes()
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=1)
    trainer.fit(model, loader(), loader())
    assert model.modes == [(False, False), (False, False)]  # sanity check and the epoch's validation
    model.modes.clear()
    trainer.validate(model, loader(), verbose=False)
    assert model.modes == [(False, True)]
    model.modes.clear()
    quiet_trainer(inference_mode=False, limit_val_batches=1).validate(model, loader(), verbose=False)
    assert model.modes == [(False, False)]


def test_a_tensor_made_in_validation_can_be_used_by_training():
    # Lightning runs in-fit validation under no_grad; an inference tensor could not be saved for backward.
    class LazyScale(Regressor):
        def validation_step(self, batch, batch_idx):
            if not hasattr(self, "scale"):
                self.scale = torch.ones(1)
            return super().validation_step(batch, batch_idx)

        def training_step(self, batch, batch_idx):
            x, y = batch
            scale = getattr(self, "scale", torch.ones(1))
            return torch.nn.functional.mse_loss(self(x) * scale, y)

    trainer = quiet_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=1)
    trainer.fit(LazyScale(), loader(), loader())
    assert trainer.global_step == 2


def test_enable_grad_inside_validation_step_works_during_fit():
    class InputGradients(Regressor):
        def validation_step(self, batch, batch_idx):
            x, y = batch
            with torch.enable_grad():
                x = x.clone().requires_grad_(True)
                loss = torch.nn.functional.mse_loss(self(x), y)
                (gradient,) = torch.autograd.grad(loss, x)
            self.log("input_grad_norm", gradient.norm())

    trainer = quiet_trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1)
    trainer.fit(InputGradients(), loader(), loader())
    assert trainer.callback_metrics["input_grad_norm"] > 0


class OneArgument(Regressor):
    """Step methods that leave out batch_idx, as Lightning allows."""

    def training_step(self, batch):
        return self.loss(batch)

    def validation_step(self, batch):
        self.log("val_loss", self.loss(batch))

    def test_step(self, batch):
        self.log("test_loss", self.loss(batch))

    def predict_step(self, batch):
        return self(batch[0])


def test_step_methods_without_batch_idx_get_only_the_batch():
    model = OneArgument()
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=2)
    trainer.fit(model, loader(), loader())
    assert trainer.global_step == 2 and "val_loss" in trainer.callback_metrics
    assert "test_loss" in trainer.test(model, loader(), verbose=False)[0]
    predictions = trainer.predict(model, loader(n=16))
    assert len(predictions) == 2 and predictions[0].shape == (8, 1)


def test_several_loaders_need_dataloader_idx_in_the_step():
    trainer = quiet_trainer()
    with pytest.raises(MisconfigurationError, match=r"several validation dataloaders.*Regressor\.validation_step"
                                                     r"\(\) has no dataloader_idx.*dataloader_idx=0"):
        trainer.validate(Regressor(), [loader(), loader()], verbose=False)


def test_several_loaders_need_dataloader_idx_in_overridden_batch_hooks_too():
    class Hooked(Regressor):
        def test_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("test_loss", self.loss(batch))

        def on_test_batch_end(self, outputs, batch, batch_idx):
            pass

    with pytest.raises(MisconfigurationError, match=r"Hooked\.on_test_batch_end\(\) has no dataloader_idx"):
        quiet_trainer().test(Hooked(), [loader(), loader()], verbose=False)


def test_one_loader_with_a_required_dataloader_idx_is_refused():
    class Required(Regressor):
        def validation_step(self, batch, batch_idx, dataloader_idx):
            self.log("val_loss", self.loss(batch))

    with pytest.raises(MisconfigurationError, match=r"one validation dataloader.*requires a dataloader_idx.*"
                                                     r"dataloader_idx=0"):
        quiet_trainer().validate(Required(), loader(), verbose=False)


# -- a step set to None, as Lightning users switch a loop off ---

def test_a_validation_step_set_to_none_turns_validation_off_in_fit_with_lightnings_warning():
    model = Regressor()
    model.validation_step = None
    trainer = quiet_trainer(max_epochs=1)
    with pytest.warns(UserWarning, match=r"a `val_dataloader` but have no `validation_step`\. Skipping val loop"):
        trainer.fit(model, loader(), loader())
    assert "val_loss" not in trainer.callback_metrics and trainer.global_step > 0


@pytest.mark.parametrize(("stage", "step"), [("validate", "validation_step"), ("test", "test_step"),
                                             ("predict", "predict_step")])
def test_evaluating_with_the_step_set_to_none_says_which_step_is_missing(stage, step):
    model = Regressor()
    setattr(model, step, None)
    with pytest.raises(MisconfigurationError, match=rf"trainer\.{stage}\(\) needs Regressor\.{step}"):
        getattr(quiet_trainer(), stage)(model, loader())


def test_a_training_step_set_to_none_is_refused_by_fit():
    model = Regressor()
    model.training_step = None
    with pytest.raises(MisconfigurationError, match="Regressor must define training_step to fit"):
        quiet_trainer(max_epochs=1).fit(model, loader())


def test_with_several_loaders_each_result_holds_what_was_logged_while_it_ran_as_in_lightning():
    class LogsPerLoader(Regressor):
        def test_step(self, batch, batch_idx, dataloader_idx):
            self.log("common", 789.0)
            self.log(f"no_suffix_{dataloader_idx}", 321.0 * (dataloader_idx + 1), add_dataloader_idx=False)
            self.log_dict({"a_class" if dataloader_idx == 0 else "b_class": 1.0}, add_dataloader_idx=False)

        def on_test_epoch_end(self):
            self.log("at_epoch_end", 5.0)  # no loader in particular: every result has it

    results = quiet_trainer().test(LogsPerLoader(), [loader(n=8), loader(n=8)], verbose=False)
    assert results == [
        {"common/dataloader_idx_0": 789.0, "no_suffix_0": 321.0, "a_class": 1.0, "at_epoch_end": 5.0},
        {"common/dataloader_idx_1": 789.0, "no_suffix_1": 642.0, "b_class": 1.0, "at_epoch_end": 5.0},
    ]
    with pytest.raises(MisconfigurationError, match=r"'x/dataloader_idx_0'.*holds a '/dataloader_idx_' suffix"):
        class NamesTheSuffix(Regressor):
            def test_step(self, batch, batch_idx):
                self.log("x/dataloader_idx_0", 1.0)

        quiet_trainer().test(NamesTheSuffix(), loader(n=8), verbose=False)
