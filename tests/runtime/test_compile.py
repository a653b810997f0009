"""``compile=``: torch.compile on the set-up module, once, with eager checkpoint keys and named failures
(the step methods compiled: tests/trainer/test_compiled_steps.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import framework
from framework.errors import MisconfigurationError
from framework.runtime import CompileError
from tests.helpers import CountingBackend, quiet_trainer
from tests.precision.models import Classifier, blob_loader, blobs, fp32_loss


def test_compiled_training_matches_eager_and_keeps_eager_keys(tmp_path):
    losses, keys = {}, {}
    for compile in (False, True):  # True: the default inductor backend, compiling C++ on this CPU
        model = Classifier()
        trainer = quiet_trainer(max_epochs=2, compile=compile, limit_val_batches=0)
        trainer.fit(model, blob_loader())
        losses[compile] = fp32_loss(model, blobs())
        path = tmp_path / f"compiled-{compile}.ckpt"
        trainer.save_checkpoint(path)
        keys[compile] = list(torch.load(path, weights_only=True)["state_dict"])
    assert model._compiled_call_impl is not None
    # Inductor may fuse and reorder fp32 arithmetic; over 16 steps that moves the loss by ~1e-6.
    assert losses[True] == pytest.approx(losses[False], rel=1e-3)
    assert keys[True] == keys[False] == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]


def test_the_module_is_compiled_once_for_every_stage():
    backend = CountingBackend()
    model = Classifier()
    trainer = quiet_trainer(max_epochs=1, compile={"backend": backend})
    trainer.fit(model, blob_loader(), blob_loader(64))
    compiled = model._compiled_call_impl
    trainer.validate(model, blob_loader(64), verbose=False)
    trainer.test(model, blob_loader(64), verbose=False)
    trainer.predict(model, blob_loader(64))
    assert model._compiled_call_impl is compiled  # not wrapped again per stage
    assert backend.graphs >= 1  # the forward really went through torch.compile
    # A second Trainer on the same, already compiled module does not compile it again either.
    quiet_trainer(max_epochs=1, compile=True).fit(model, blob_loader())
    assert model._compiled_call_impl is compiled


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(3, 2)

    def forward(self, x):
        return self.layer(x).relu()


def test_runtime_compile_for_a_hand_written_loop():
    backend = CountingBackend()
    runtime = framework.Runtime(accelerator="cpu", compile={"backend": backend})
    model = runtime.setup(Tiny())
    assert type(model.module) is Tiny  # compiled in place, not wrapped in torch's OptimizedModule
    model(torch.ones(4, 3))
    assert backend.graphs == 1
    assert list(model.state_dict()) == ["layer.weight", "layer.bias"]


@pytest.mark.parametrize("value", ["yes", 1, ["inductor"], {1: "x"}])
def test_a_wrong_compile_value_is_refused(value):
    with pytest.raises(MisconfigurationError, match=r"compile=.* is not accepted.*True, False, or a dict"):
        quiet_trainer(compile=value)


def test_an_unknown_compile_mode_is_refused_with_torchs_reason():
    with pytest.raises(MisconfigurationError, match=r"compile=\{'mode': 'fastest'\}: torch.compile refused it: .*"):
        framework.Runtime(accelerator="cpu", compile={"mode": "fastest"}).setup(nn.Linear(2, 2))


def test_a_model_error_met_while_compiling_is_named_by_its_own_message():
    class WrongWidth(Classifier):
        def forward(self, x):
            return self.net(x[:, :5])  # the first layer takes 8 features

    trainer = quiet_trainer(max_steps=1, compile={"backend": "eager"})
    expected = r"failed on WrongWidth\.training_step: RuntimeError: .*shapes|reduction dim"
    with pytest.raises(CompileError, match=expected):
        trainer.fit(WrongWidth(), blob_loader())
