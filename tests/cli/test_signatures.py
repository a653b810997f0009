"""The constructors command lines are built from: their annotations are types that a signature reader gets as
they are (``inspect.signature``, as jsonargparse reads them), not source text it would have to evaluate."""

from __future__ import annotations

import importlib
import inspect
import typing

import pytest

import framework.callbacks
from framework.callbacks import ModelCheckpoint
from framework.cli.signatures import parameters

CALLBACKS = [getattr(framework.callbacks, name) for name in framework.callbacks.__all__
             if inspect.isclass(getattr(framework.callbacks, name))]

# The other modules whose classes users configure by their constructor (a Trainer's arguments, a logger, a
# strategy, a precision, a profiler, the Tuner, the Accelerate-style API): none postpones its annotations.
CONFIGURED_MODULES = [
    "framework.trainer.trainer", "framework.module", "framework.datamodule", "framework.runtime.runtime",
    "framework.loggers.base", "framework.loggers.csv", "framework.loggers.tensorboard", "framework.loggers.mlflow",
    "framework.loggers.wandb",
    "framework.strategies.base", "framework.strategies.parallel", "framework.strategies.single",
    "framework.strategies.ddp", "framework.strategies.zero1", "framework.strategies.fsdp",
    "framework.strategies.model_parallel",
    "framework.precision.base", "framework.precision.amp", "framework.precision.true",
    "framework.profilers.base", "framework.profilers.simple", "framework.profilers.advanced",
    "framework.profilers.pytorch",
    "framework.tuner.tuning", "framework.callbacks.lr_finder", "framework.callbacks.lr_finder_result",
    "framework.accelerate.accelerator", "framework.accelerate.state", "framework.accelerate.tracking",
    "framework.accelerate.local_sgd", "framework.accelerate.utils.kwargs_handlers",
    "framework.accelerate.utils.configuration", "framework.accelerate.data_loader", "framework.accelerate.prepared",
]


def _public_classes(module_name):
    module = importlib.import_module(module_name)
    return [value for name, value in vars(module).items()
            if inspect.isclass(value) and value.__module__ == module_name and not name.startswith("_")]


CONFIGURED = [cls for module_name in CONFIGURED_MODULES for cls in _public_classes(module_name)]


@pytest.mark.parametrize("cls", CALLBACKS, ids=lambda cls: cls.__name__)
def test_every_callback_constructor_has_its_annotations_as_types(cls):
    written_as_text = {name: parameter.annotation for name, parameter in inspect.signature(cls).parameters.items()
                       if isinstance(parameter.annotation, str)}
    # A module with `from __future__ import annotations` gives text: jsonargparse then fails with
    # "'bool | str | None' is not callable" (framework/callbacks/__init__.py says why they have none).
    assert written_as_text == {}
    named, annotations, _ = parameters(cls)
    assert annotations == {name: parameter.annotation for name, parameter in named.items()}


@pytest.mark.parametrize("cls", CONFIGURED, ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_every_configured_constructor_has_its_annotations_as_types(cls):
    written_as_text = {name: parameter.annotation for name, parameter in inspect.signature(cls).parameters.items()
                       if isinstance(parameter.annotation, str)}
    assert written_as_text == {}  # see the callbacks' test above: text here breaks jsonargparse
    named, annotations, _ = parameters(cls)
    assert annotations == {name: parameter.annotation for name, parameter in named.items()}


def test_the_configured_modules_hold_public_classes():
    # a module renamed or emptied would otherwise leave the test above checking nothing there
    assert all(_public_classes(module_name) for module_name in CONFIGURED_MODULES)
    for name in ("Trainer", "Module", "DataModule", "Runtime", "CSVLogger", "TensorBoardLogger", "MLFlowLogger",
                 "WandbLogger", "DDPStrategy", "FSDPStrategy", "Tuner", "LRFinder", "Accelerator", "LocalSGD",
                 "ProjectConfiguration", "DistributedDataParallelKwargs"):
        assert name in {cls.__name__ for cls in CONFIGURED}


def test_save_last_is_a_bool_or_link_or_none():
    annotation = inspect.signature(ModelCheckpoint).parameters["save_last"].annotation
    assert set(typing.get_args(annotation)) == {bool, typing.Literal["link"], type(None)}
