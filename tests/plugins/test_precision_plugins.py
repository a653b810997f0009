"""Lightning's precision plugins in ``plugins=``: each builds framework's precision of the same name, trains as
``precision=`` does, and cannot be given with ``precision=``; ``BitsandbytesPrecision`` is refused, saying so."""

from __future__ import annotations

import pytest
import torch

import framework
from framework.errors import MisconfigurationError, NotProvidedError
from framework.plugins import BitsandbytesPrecision, DoublePrecision, HalfPrecision, MixedPrecision, Precision
from framework.precision import BFloat16Mixed, BFloat16True, Float16Mixed, Float16True, Float64True
from tests.helpers import Regressor, loader, quiet_trainer


@pytest.mark.parametrize(("plugin", "built", "name"), [
    (lambda: Precision(), Precision, "32-true"),
    (lambda: MixedPrecision("16-mixed", "cpu"), Float16Mixed, "16-mixed"),
    (lambda: MixedPrecision("bf16-mixed", "cuda"), BFloat16Mixed, "bf16-mixed"),
    (lambda: HalfPrecision("bf16-true"), BFloat16True, "bf16-true"),
    (lambda: HalfPrecision(), Float16True, "16-true"),
    (lambda: DoublePrecision(), Float64True, "64-true"),
])
def test_each_plugin_is_the_precision_of_its_name(plugin, built, name):
    trainer = quiet_trainer(plugins=[plugin()])
    assert trainer.precision == name and type(trainer.precision_plugin) is built


def test_isinstance_holds_for_what_a_plugin_class_builds():
    assert isinstance(MixedPrecision("16-mixed", "cpu"), MixedPrecision)
    assert isinstance(framework.Trainer(precision="bf16-mixed", logger=False).precision_plugin, MixedPrecision)
    assert isinstance(HalfPrecision("bf16-true"), HalfPrecision) and not isinstance(DoublePrecision(), HalfPrecision)


def test_training_with_a_plugin_matches_training_with_the_precision_argument():
    by_plugin, by_name = Regressor(), Regressor()
    quiet_trainer(max_epochs=1, plugins=[DoublePrecision()]).fit(by_plugin, loader())
    quiet_trainer(max_epochs=1, precision="64-true").fit(by_name, loader())
    assert by_plugin.net.weight.dtype is torch.float64
    torch.testing.assert_close(by_plugin.state_dict(), by_name.state_dict(), rtol=0, atol=0)


def test_a_scaler_given_to_the_plugin_is_the_one_used():
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    trainer = quiet_trainer(plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)])
    assert trainer.precision_plugin.scaler is scaler


def test_what_cannot_work_is_refused_by_name():
    with pytest.raises(MisconfigurationError, match=r"precision='16-mixed' and the precision plugin .* choose one"):
        quiet_trainer(precision="16-mixed", plugins=[DoublePrecision()])
    with pytest.raises(MisconfigurationError, match=r"holds two precision plugins"):
        quiet_trainer(plugins=[DoublePrecision(), HalfPrecision()])
    with pytest.raises(MisconfigurationError, match=r"MixedPrecision\(precision='32'.*'16-mixed' and 'bf16-mixed'"):
        MixedPrecision("32", "cpu")
    with pytest.raises(MisconfigurationError, match=r"bfloat16 needs no loss scaling"):
        MixedPrecision("bf16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
    with pytest.raises(NotProvidedError, match=r"BitsandbytesPrecision .* is not provided by framework"):
        BitsandbytesPrecision("nf4")
