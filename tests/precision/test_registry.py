"""``precision=``: every accepted spelling, instances, unknown and not-yet-available modes."""

from __future__ import annotations

import pytest

from framework.errors import MisconfigurationError
from framework.precision import (
    BFloat16Mixed,
    BFloat16True,
    Float16Mixed,
    Float16True,
    Float64True,
    Precision,
    register_precision,
    registry,
    resolve_precision,
)


@pytest.fixture
def builders():
    """The registry's builders, restored after the test."""
    saved = dict(registry._BUILDERS)
    yield registry._BUILDERS
    registry._BUILDERS.clear()
    registry._BUILDERS.update(saved)


@pytest.mark.parametrize("spelling", [32, "32", "32-true", "fp32", "FP32", "32-TRUE"])
def test_every_32_bit_spelling(spelling):
    precision = resolve_precision(spelling)
    assert isinstance(precision, Precision)
    assert precision.name == "32-true"


@pytest.mark.parametrize(("spelling", "cls"), [
    (64, Float64True), ("64", Float64True), ("64-true", Float64True),
    (16, Float16Mixed), ("16", Float16Mixed), ("fp16", Float16Mixed), ("16-mixed", Float16Mixed),
    ("bf16", BFloat16Mixed), ("bf16-mixed", BFloat16Mixed), ("BF16-Mixed", BFloat16Mixed),
    ("bf16-true", BFloat16True), ("16-true", Float16True),
])
def test_every_spelling_maps_to_its_mode(spelling, cls):
    precision = resolve_precision(spelling)
    assert type(precision) is cls
    assert resolve_precision(precision.name).name == precision.name  # the canonical name is itself accepted


def test_each_call_builds_a_new_precision():
    assert resolve_precision("32") is not resolve_precision("32")


def test_an_instance_passes_through():
    precision = Precision()
    assert resolve_precision(precision) is precision


@pytest.mark.parametrize("spelling", ["17", 17, "fp8", "", None, True, 32.0, ["32"]])
def test_unknown_spellings_list_the_accepted_ones(spelling):
    with pytest.raises(MisconfigurationError, match=r"is not a precision mode") as info:
        resolve_precision(spelling)
    message = str(info.value)
    assert f"precision={spelling!r}" in message
    for accepted in ("32", "'32-true'", "'16-mixed'", "'bf16-mixed'", "'bf16-true'", "'64-true'",
                     "Precision instance"):
        assert accepted in message, message


@pytest.mark.parametrize(("spelling", "canonical"), [
    ("16-mixed", "16-mixed"), (16, "16-mixed"), ("fp16", "16-mixed"),
    ("bf16", "bf16-mixed"), ("BF16", "bf16-mixed"),
])
def test_a_known_mode_without_a_builder_says_it_is_not_available(builders, spelling, canonical):
    builders.pop(canonical, None)  # as before the mode is registered, whatever this version already has
    expected = rf"precision={spelling!r} \({canonical}\) is not available"
    with pytest.raises(MisconfigurationError, match=expected) as info:
        resolve_precision(spelling)
    assert "'32-true'" in str(info.value)  # lists what is available


def test_register_precision_makes_a_mode_available(builders):
    class Half(Precision):
        name = "16-mixed"

    register_precision("16-mixed", Half)
    assert type(resolve_precision("fp16")) is Half
    assert type(resolve_precision(16)) is Half


class _Scaled16(Float16Mixed):
    """A precision of one's own, under a name of its own."""

    name = "scaled-16"


@pytest.fixture
def scaled_16():
    """``_Scaled16`` registered as "scaled-16" (alias "s16"), forgotten after the test."""
    saved_builders, saved_spellings = dict(registry._BUILDERS), dict(registry.CANONICAL)
    register_precision("scaled-16", _Scaled16, aliases=("S16",))
    yield
    registry._BUILDERS.clear()
    registry._BUILDERS.update(saved_builders)
    registry.CANONICAL.clear()
    registry.CANONICAL.update(saved_spellings)


def test_a_registered_name_works_in_the_trainer_the_command_line_and_the_accelerator(scaled_16, tmp_path):
    from framework.accelerate import Accelerator
    from framework.cli import run
    from tests.helpers import Regressor, loader, quiet_trainer

    assert registry.added_names()[-1] == "scaled-16"
    for spelling in ("scaled-16", "Scaled-16", "s16"):
        assert type(resolve_precision(spelling)) is _Scaled16
    trainer = quiet_trainer(precision="s16", max_steps=2)
    trainer.fit(Regressor(), loader())
    assert type(trainer.precision_plugin) is _Scaled16 and trainer.precision == "scaled-16"

    config = tmp_path / "run.yaml"
    config.write_text("trainer:\n  max_steps: 2\n  accelerator: cpu\n  precision: scaled-16\n"
                      f"  default_root_dir: {tmp_path}\n"
                      "model:\n  class_path: tests.cli.cli_classes.Net\n"
                      "data:\n  class_path: tests.cli.cli_classes.Data\n")
    fitted = run(args=["fit", "--config", str(config), "--trainer.enable_progress_bar=false"])
    assert type(fitted.trainer.precision_plugin) is _Scaled16 and fitted.trainer.global_step == 2

    accelerator = Accelerator(mixed_precision="scaled-16", cpu=True)
    assert accelerator.mixed_precision == "scaled-16" and type(accelerator._runtime.precision) is _Scaled16
    with pytest.raises(MisconfigurationError, match=r"accepted 'no', 'fp16', 'bf16'.*'scaled-16'"):
        Accelerator(mixed_precision="scaled-17", cpu=True)


def test_register_precision_refuses_a_name_that_is_not_a_string(builders):
    with pytest.raises(MisconfigurationError, match=r"register_precision: the name 16 \(type int\) must be"):
        register_precision(16, _Scaled16)
