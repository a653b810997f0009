"""The training step against plain PyTorch: accumulation, clipping, manual optimization, closures."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import framework
from framework.trainer.state import TrainerStatus
from tests.helpers import Regressor, loader, quiet_trainer, regression_data


def _plain_weights(batch_size: int, steps_per_epoch: int, epochs: int, lr: float = 0.05, clip=None) -> torch.Tensor:
    torch.manual_seed(0)
    net = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    data = DataLoader(regression_data(64), batch_size=batch_size)
    for _ in range(epochs):
        for step, (x, y) in enumerate(data):
            if step == steps_per_epoch:
                break
            nn.functional.mse_loss(net(x), y).backward()
            if clip is not None:
                clip(net.parameters())
            optimizer.step()
            optimizer.zero_grad()
    return torch.cat([net.weight.flatten(), net.bias])


def _weights(model: Regressor) -> torch.Tensor:
    return torch.cat([model.net.weight.detach().flatten(), model.net.bias.detach()])


def test_fit_matches_a_plain_pytorch_loop():
    model = Regressor()
    quiet_trainer(max_epochs=2).fit(model, loader(batch_size=8))
    torch.testing.assert_close(_weights(model), _plain_weights(8, 8, 2))


def test_gradient_accumulation_equals_a_k_times_larger_batch():
    model = Regressor()
    trainer = quiet_trainer(max_epochs=2, accumulate_grad_batches=4)
    trainer.fit(model, loader(batch_size=4))
    assert trainer.global_step == 2 * 16 // 4
    torch.testing.assert_close(_weights(model), _plain_weights(16, 4, 2))


def test_accumulation_steps_on_the_last_batch_of_an_epoch():
    trainer = quiet_trainer(max_epochs=2, accumulate_grad_batches=3)
    trainer.fit(Regressor(), loader(n=40, batch_size=4))  # 10 batches -> steps after 3, 6, 9, 10
    assert trainer.global_step == 8 == trainer.estimated_stepping_batches


@pytest.mark.parametrize(("algorithm", "value", "clip"), [
    ("norm", 0.5, lambda params: nn.utils.clip_grad_norm_(params, 0.5)),
    ("value", 0.05, lambda params: nn.utils.clip_grad_value_(params, 0.05)),
])
def test_gradient_clipping_equals_torch_clipping(algorithm, value, clip):
    model = Regressor()
    trainer = quiet_trainer(max_epochs=1, gradient_clip_val=value, gradient_clip_algorithm=algorithm)
    trainer.fit(model, loader(batch_size=8))
    expected = _plain_weights(8, 8, 1, clip=clip)
    torch.testing.assert_close(_weights(model), expected)
    assert not torch.allclose(expected, _plain_weights(8, 8, 1)), "the clip must change something to be tested"


def test_gradients_seen_before_the_step_are_clipped():
    norms = []

    class Check(Regressor):
        def on_before_optimizer_step(self, optimizer):
            norms.append(None)

        def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
            grads = [p.grad for p in self.parameters()]
            norms[-1] = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()

    quiet_trainer(max_epochs=1, gradient_clip_val=0.1).fit(Check(), loader())
    assert len(norms) == 8 and all(n <= 0.1 + 1e-6 for n in norms)


class TwoOptimizers(Regressor):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.other = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        first, second = self.optimizers()
        x, y = batch
        for optimizer, layer in ((first, self.net), (second, self.other)):
            loss = nn.functional.mse_loss(layer(x), y)
            optimizer.zero_grad()
            self.manual_backward(loss)
            self.clip_gradients(optimizer, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
            optimizer.step()
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return [torch.optim.SGD(self.net.parameters(), lr=0.05), torch.optim.SGD(self.other.parameters(), lr=0.05)]


def test_manual_optimization_counts_every_optimizer_step():
    trainer = quiet_trainer(max_epochs=2, limit_train_batches=16)
    model = TwoOptimizers()
    trainer.fit(model, loader(n=128))
    assert trainer.global_step == 2 * 16 * 2


def test_manual_optimization_matches_plain_pytorch():
    class OneOptimizer(Regressor):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            optimizer = self.optimizers()
            loss = self.loss(batch)
            self.manual_backward(loss)
            optimizer.step()
            optimizer.zero_grad()

    model = OneOptimizer()
    quiet_trainer(max_epochs=2).fit(model, loader())
    torch.testing.assert_close(_weights(model), _plain_weights(8, 8, 2))


@pytest.mark.parametrize("precision", ["32-true", "16-mixed"])
def test_manual_step_with_a_closure_runs_it_before_on_before_optimizer_step(precision):
    class WithClosure(Regressor):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.calls: list[str] = []

        def training_step(self, batch, batch_idx):
            optimizer = self.optimizers()

            def closure():
                self.calls.append("closure")
                loss = self.loss(batch)
                self.manual_backward(loss)
                return loss

            optimizer.step(closure=closure)
            optimizer.zero_grad()

        def on_before_optimizer_step(self, optimizer):
            grads = [p.grad for p in self.parameters()]
            self.calls.append("hook with gradients" if all(g is not None for g in grads) else "hook without")

    model = WithClosure()
    quiet_trainer(max_steps=2, precision=precision).fit(model, loader())
    assert model.calls == ["closure", "hook with gradients"] * 2


def test_an_optimizer_step_override_gets_a_closure_that_trains():
    class Warmup(Regressor):
        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            for group in optimizer.param_groups:
                group["lr"] = 0.05
            optimizer.step(closure=optimizer_closure)

    model = Warmup(lr=1.0)
    trainer = quiet_trainer(max_epochs=2)
    trainer.fit(model, loader())
    assert trainer.global_step == 16
    torch.testing.assert_close(_weights(model), _plain_weights(8, 8, 2))


def test_lbfgs_calls_the_closure_several_times():
    class WithLBFGS(Regressor):
        def configure_optimizers(self):
            return torch.optim.LBFGS(self.parameters(), lr=0.5, max_iter=5)

    model = WithLBFGS()
    trainer = quiet_trainer(max_epochs=3)
    trainer.fit(model, loader())
    x, y = regression_data(64).tensors
    assert nn.functional.mse_loss(model(x), y).item() < 0.05


def test_training_step_returning_none_skips_the_update():
    class Skips(Regressor):
        def training_step(self, batch, batch_idx):
            return None if batch_idx % 2 else super().training_step(batch, batch_idx)

    model = Skips()
    before = _weights(model).clone()
    with pytest.warns(UserWarning, match="returned None at batch 1 of epoch 0") as warned:
        quiet_trainer(max_epochs=2, limit_train_batches=4).fit(model, loader())
    assert not torch.equal(before, _weights(model))
    assert sum("returned None" in str(warning.message) for warning in warned) == 1  # once per fit


def test_outputs_given_to_on_train_batch_end_match_lightning():
    seen = []

    class Extra(Regressor):
        def training_step(self, batch, batch_idx):
            return {"loss": self.loss(batch), "extra": batch_idx}

        def on_train_batch_end(self, outputs, batch, batch_idx):
            seen.append(outputs)

    quiet_trainer(max_epochs=1, limit_train_batches=2, accumulate_grad_batches=2).fit(Extra(), loader())
    assert [sorted(o) for o in seen] == [["extra", "loss"], ["extra", "loss"]]
    assert not seen[0]["loss"].requires_grad


def test_keyboard_interrupt_ends_fit_gracefully_and_goes_on_to_the_caller():
    exceptions = []

    class Interrupts(Regressor):
        def training_step(self, batch, batch_idx):
            if batch_idx == 3:
                raise KeyboardInterrupt
            return super().training_step(batch, batch_idx)

    class Watch(framework.Callback):
        def on_exception(self, trainer, module, exception):
            exceptions.append(type(exception))

    trainer = quiet_trainer(max_epochs=1, callbacks=[Watch()])
    with pytest.warns(UserWarning, match="the interrupt goes on to the caller"), pytest.raises(KeyboardInterrupt):
        trainer.fit(Interrupts(), loader())
    assert trainer.state.status == TrainerStatus.INTERRUPTED
    assert trainer.global_step == 3
    assert exceptions == [KeyboardInterrupt]


def test_other_exceptions_propagate_after_on_exception():
    seen = []

    class Fails(Regressor):
        def training_step(self, batch, batch_idx):
            raise RuntimeError("boom")

        def on_exception(self, exception):
            seen.append(str(exception))

    trainer = quiet_trainer(max_epochs=1)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Fails(), loader())
    assert seen == ["boom"]
    assert trainer.state.status == TrainerStatus.INTERRUPTED


def test_fit_twice_continues_from_the_reached_epoch():
    model = Regressor()
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(model, loader())
    first = copy.deepcopy(_weights(model))
    trainer.fit_loop = None
    trainer.max_epochs = 2
    trainer.fit(model, loader())
    assert trainer.current_epoch == 2 and trainer.global_step == 16
    assert not torch.equal(first, _weights(model))


def test_an_unfinished_accumulation_window_does_not_leak_into_the_next_epoch():
    leftovers = []

    class EndsMidWindow(Regressor):
        def on_train_batch_start(self, batch, batch_idx):
            return -1 if batch_idx == 3 else None  # batches 0-2: a step after 1, batch 2 left accumulated

        def on_before_backward(self, loss):
            if self.trainer.state.batch_idx == 0:  # a window's first batch: zeroed after training_step, as Lightning
                leftovers.append([p.grad for p in self.parameters()])

    model = EndsMidWindow()
    model.net.weight.grad = torch.ones_like(model.net.weight)  # left by the caller before fit
    quiet_trainer(max_epochs=2, accumulate_grad_batches=2).fit(model, loader())
    assert leftovers == [[None, None], [None, None]]


def test_fit_keeps_submodule_modes_and_warns_when_the_model_is_in_eval_mode():
    modes = []

    class FrozenPart(Regressor):
        def __init__(self):
            super().__init__()
            self.frozen = nn.BatchNorm1d(4)
            self.frozen.eval()

        def training_step(self, batch, batch_idx):
            modes.append((self.training, self.frozen.training))
            return super().training_step(batch, batch_idx)

    quiet_trainer(max_epochs=1, limit_train_batches=1).fit(FrozenPart(), loader())
    assert modes == [(True, False)]
    model = Regressor().eval()
    with pytest.warns(UserWarning, match="eval mode at the start of fit"):
        quiet_trainer(max_epochs=1, limit_train_batches=1).fit(model, loader())


def test_a_failure_before_the_new_run_starts_does_not_call_the_previous_models_hooks():
    calls = []

    class Watches(Regressor):
        def on_exception(self, exception):
            calls.append(type(self).__name__)

    class BadData(Regressor):
        def train_dataloader(self):
            raise RuntimeError("no data")

    trainer = quiet_trainer(max_epochs=1, limit_train_batches=1)
    first = Watches()
    trainer.fit(first, loader())
    trainer.max_epochs = 2  # so the second fit has an epoch to train and asks for its loader
    with pytest.raises(RuntimeError, match="no data"):
        trainer.fit(BadData())
    assert calls == []
    # the first model's optimizer is not paired with the second model
    first_params = {id(p) for p in first.parameters()}
    assert not any(id(p) in first_params for opt in trainer.optimizers for g in opt.param_groups for p in g["params"])


def test_the_strategy_is_torn_down_after_every_run_even_a_failed_one():
    from framework.strategies import SingleDeviceStrategy

    class Counting(SingleDeviceStrategy):
        teardowns = 0

        def teardown(self):
            Counting.teardowns += 1

    trainer = quiet_trainer(max_epochs=1, limit_train_batches=1, strategy=Counting())
    trainer.fit(Regressor(), loader())
    trainer.validate(Regressor(), loader(), verbose=False)
    with pytest.raises(framework.MisconfigurationError):
        trainer.test(Regressor(), [])
    assert Counting.teardowns == 3


def test_manual_training_step_returning_something_odd_is_refused():
    class Odd(Regressor):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            return "done"

    with pytest.raises(framework.MisconfigurationError, match="training_step returned 'done'"):
        quiet_trainer(max_epochs=1).fit(Odd(), loader())


def test_a_validation_inside_an_accumulation_window_keeps_the_gathered_gradients():
    # on_validation_model_zero_grad runs only where no gradients are pending (as in Lightning), so an
    # override that zeroes them cannot drop half an accumulation window.
    class ZeroesBeforeValidation(Regressor):
        def __init__(self):
            super().__init__()
            self.zeroed_at: list[int] = []

        def on_validation_model_zero_grad(self):
            self.zeroed_at.append(self.global_step)
            self.zero_grad(set_to_none=True)

    plain = Regressor()
    quiet_trainer(max_epochs=1, accumulate_grad_batches=4).fit(plain, loader())
    validated = ZeroesBeforeValidation()
    quiet_trainer(max_epochs=1, accumulate_grad_batches=4, val_check_interval=2, num_sanity_val_steps=0).fit(
        validated, loader(), loader(n=16))
    assert validated.zeroed_at == [1, 2]  # after batches 4 and 8, not after 2 and 6
    for a, b in zip(plain.parameters(), validated.parameters()):
        torch.testing.assert_close(a, b)


def test_configure_gradient_clipping_gets_the_algorithm_as_given():
    seen = []

    class Clips(Regressor):
        def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
            seen.append((gradient_clip_val, gradient_clip_algorithm))
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    quiet_trainer(max_epochs=1, limit_train_batches=1, gradient_clip_val=0.5).fit(Clips(), loader())
    quiet_trainer(max_epochs=1, limit_train_batches=1, gradient_clip_val=0.5,
                  gradient_clip_algorithm="value").fit(Clips(), loader())
    assert seen == [(0.5, None), (0.5, "value")]


@pytest.mark.parametrize(("settings", "message"), [
    ({"max_epochs": 2}, "`Trainer.fit` stopped: `max_epochs=2` reached."),
    ({"max_epochs": 5, "max_steps": 3}, "`Trainer.fit` stopped: `max_steps=3` reached."),
    ({"max_epochs": 2, "limit_train_batches": 0}, "`Trainer.fit` stopped: No training batches."),
])
def test_fit_says_which_limit_ended_it(caplog, settings, message):
    with caplog.at_level("INFO", logger="framework"):
        quiet_trainer(**settings).fit(Regressor(), loader())
    stops = [r.getMessage() for r in caplog.records if "stopped" in r.getMessage()]
    assert stops == [message]  # once, in Lightning's words


def test_a_stop_asked_for_by_a_callback_is_left_to_it_to_explain(caplog):
    class Stops(framework.Callback):
        def on_train_epoch_end(self, trainer, module):
            trainer.should_stop = True

    with caplog.at_level("INFO", logger="framework"):
        quiet_trainer(max_epochs=3, callbacks=[Stops()]).fit(Regressor(), loader())
    assert not [r for r in caplog.records if "stopped" in r.getMessage()]
