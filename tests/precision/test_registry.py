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
