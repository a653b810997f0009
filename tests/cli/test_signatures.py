"""The constructors command lines are built from: their annotations are types that a signature reader gets as
they are (``inspect.signature``, as jsonargparse reads them), not source text it would have to evaluate."""

from __future__ import annotations

import inspect
import typing

import pytest

import framework.callbacks
from framework.callbacks import ModelCheckpoint
from framework.cli.signatures import parameters

CALLBACKS = [getattr(framework.callbacks, name) for name in framework.callbacks.__all__
             if inspect.isclass(getattr(framework.callbacks, name))]


@pytest.mark.parametrize("cls", CALLBACKS, ids=lambda cls: cls.__name__)
def test_every_callback_constructor_has_its_annotations_as_types(cls):
    written_as_text = {name: parameter.annotation for name, parameter in inspect.signature(cls).parameters.items()
                       if isinstance(parameter.annotation, str)}
    # A module with `from __future__ import annotations` gives text: jsonargparse then fails with
    # "'bool | str | None' is not callable" (framework/callbacks/__init__.py says why they have none).
    assert written_as_text == {}
    named, annotations, _ = parameters(cls)
    assert annotations == {name: parameter.annotation for name, parameter in named.items()}


def test_save_last_is_a_bool_or_link_or_none():
    annotation = inspect.signature(ModelCheckpoint).parameters["save_last"].annotation
    assert set(typing.get_args(annotation)) == {bool, typing.Literal["link"], type(None)}
