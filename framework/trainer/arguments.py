"""Checks of the Trainer's own arguments: each bad value gets an error naming it and what is accepted. The checks
every layer shares (an int, a bool, a choice ...) are ``framework.checks``'s, here with the Trainer as owner."""

from __future__ import annotations

import ast
import functools
import inspect
import os
from collections.abc import Callable, Iterable
from typing import Any

from framework import checks, console
from framework.datamodule import DataModule
from framework.errors import MisconfigurationError, describe
from framework.module import Module

OWNER = "Trainer"
check_bool = functools.partial(checks.check_bool, OWNER)
check_int = functools.partial(checks.check_int, OWNER)
check_choice = functools.partial(checks.check_choice, OWNER)
check_list_of = functools.partial(checks.check_list_of, OWNER)


def _fail(name: str, value: Any, accepted: str) -> MisconfigurationError:
    return checks.bad_value(OWNER, name, value, accepted)


def check_optional_number(name: str, value: Any, minimum: float = 0.0) -> float | None:
    """``value`` as a float >= ``minimum`` (nan is rejected), or None."""
    return checks.check_number(OWNER, name, value, minimum, allow_none=True)


def check_order(low_name: str, low: int | None, high_name: str, high: int) -> None:
    """``min_*`` must not exceed ``max_*`` (-1 means no maximum)."""
    if low is not None and high != -1 and low > high:
        raise MisconfigurationError(
            f"Trainer({low_name}={low}, {high_name}={high}): {low_name} must not exceed {high_name}."
        )


def check_limit(name: str, value: Any) -> int | float:
    """``limit_*_batches`` and ``overfit_batches``: an int count of batches or a float fraction in [0, 1]."""
    if value is None:
        return 1.0
    if not checks.is_number(value):
        raise _fail(name, value, "an int number of batches (>= 0) or a float fraction between 0.0 and 1.0")
    if isinstance(value, float):
        if not 0.0 <= value <= 1.0:
            raise _fail(name, value, "a float between 0.0 and 1.0 (a fraction of the batches), or an int count")
    elif value < 0:
        raise _fail(name, value, "an int number of batches (>= 0) or a float fraction between 0.0 and 1.0")
    return value


def note_one_or_all(**given: Any) -> None:
    """Tell, as Lightning does, what an int 1 (one batch) or a float 1.0 (all of them) means for a batch limit
    or ``val_check_interval``, where they read alike."""
    for name, value in given.items():
        if isinstance(value, bool) or value != 1:
            continue
        if isinstance(value, int):
            meaning = {"limit_train_batches": "1 batch per epoch will be used",
                       "val_check_interval": "validation will run after every batch"}.get(name, "1 batch will be used")
        else:
            meaning = {"limit_train_batches": "100% of the batches per epoch will be used",
                       "val_check_interval": "validation will run at the end of the training epoch"}.get(
                           name, "100% of the batches will be used")
        console.info(f"`Trainer({name}={value!r})` was configured so {meaning}.")


def check_val_check_interval(value: Any, every_n_epochs: int | None = 1) -> int | float:
    """``val_check_interval``: an int number of batches >= 1 or a fraction in (0.0, 1.0]; None means 1.0. Without
    epochs (``check_val_every_n_epoch=None``) a fraction is refused, as in Lightning."""
    if value is None:
        return 1.0
    if every_n_epochs is None and isinstance(value, float):
        raise MisconfigurationError(
            f"Trainer(val_check_interval={value!r}, check_val_every_n_epoch=None): without epochs, validation is "
            "counted in training batches across them, so val_check_interval must be an int number of batches."
        )
    if not checks.is_number(value):
        raise _fail("val_check_interval", value, "an int number of training batches (>= 1) or a float in (0.0, 1.0]")
    if isinstance(value, float) and not 0.0 < value <= 1.0:
        raise _fail("val_check_interval", value, "a float fraction of the epoch in (0.0, 1.0], or an int >= 1")
    if isinstance(value, int) and value < 1:
        raise _fail("val_check_interval", value, "an int number of training batches >= 1, or a float in (0.0, 1.0]")
    return value


def check_fast_dev_run(value: Any) -> int:
    """The number of batches fast_dev_run runs (0 when off)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and value >= 0:
        return value
    raise _fail("fast_dev_run", value, "True, False or an int number of batches >= 0")


def check_root_dir(value: Any) -> str:
    """``default_root_dir`` as a string; None means the current working directory."""
    if value is None:
        return os.getcwd()
    if not isinstance(value, (str, os.PathLike)):
        raise _fail("default_root_dir", value, "a path (str or os.PathLike) or None")
    return os.fspath(value)


# What barebones=True turns off (each costs speed), with the value that means "off".
_BAREBONES_OFF = {
    "enable_checkpointing": (False, "checkpointing"), "logger": (False, "logging"),
    "enable_progress_bar": (False, "the progress bar"), "log_every_n_steps": (0, "logging"),
    "enable_model_summary": (False, "the model summary"), "num_sanity_val_steps": (0, "the sanity check"),
}


def barebones_settings(**given: Any) -> tuple:
    """The settings ``barebones=True`` imposes, in ``_BAREBONES_OFF``'s order (as Lightning's barebones mode);
    a feature it turns off, or one meant for debugging (``fast_dev_run``, ``detect_anomaly``), asked for
    explicitly is refused rather than silently dropped."""
    for name, (off, what) in _BAREBONES_OFF.items():
        value = given[name]
        if value is not None and value != off:
            raise MisconfigurationError(
                f"Trainer(barebones=True, {name}={describe(value)}): barebones mode turns {what} off, as it costs "
                f"speed. Leave {name} out, or drop barebones=True."
            )
    for name in ("fast_dev_run", "detect_anomaly"):
        if given[name] not in (False, 0, None):
            raise MisconfigurationError(
                f"Trainer(barebones=True, {name}={describe(given[name])}): barebones mode measures raw speed, which "
                f"{name} is not meant for. Use one or the other."
            )
    return tuple(off for off, _ in _BAREBONES_OFF.values())


# Environment variables that set Trainer defaults: ours first, then Lightning's, so scripts and clusters set up
# for Lightning keep working.
ENVIRONMENT_PREFIXES = ("FRAMEWORK_TRAINER_", "PL_TRAINER_")


def environment_defaults(names: list[str]) -> dict[str, Any]:
    """The Trainer arguments set in the environment (``FRAMEWORK_TRAINER_MAX_EPOCHS=3``, or Lightning's
    ``PL_TRAINER_MAX_EPOCHS=3``), read as Python literals (``False``, ``3``, ``'cpu'``) where they are one."""
    return {name: value for name, (value, _) in environment_settings(names).items()}


def environment_settings(names: list[str]) -> dict[str, tuple[Any, str]]:
    """``environment_defaults`` with the variable each value came from, to name it in errors."""
    found: dict[str, tuple[Any, str]] = {}
    for name in names:
        for prefix in ENVIRONMENT_PREFIXES:
            variable = prefix + name.upper()
            text = os.environ.get(variable)
            if text:
                try:
                    found[name] = (ast.literal_eval(text), variable)
                except (ValueError, SyntaxError):  # a bare word: the text itself ("cpu", "ddp")
                    found[name] = (text, variable)
                break
    return found


def with_environment_defaults(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` (keyword-only arguments) taking its defaults from the environment, where an argument is not given."""
    names = [name for name in inspect.signature(init).parameters if name != "self"]

    @functools.wraps(init)
    def from_environment(self: Any, **given: Any) -> None:
        arguments = {**environment_defaults(names), **given}
        self._init_arguments = arguments  # to make a Trainer like this one (the Tuner's trial runs)
        init(self, **arguments)

    return from_environment


#: What ``validate``, ``test`` and ``predict`` take as ``dataloaders``.
Loaders = Iterable | list[Iterable] | DataModule | None


def datamodule_or_loaders(entry: str, datamodule: Any, dataloaders: Any, *more_loaders: Any) -> tuple[Any, Any]:
    """A DataModule passed as ``dataloaders`` counts as ``datamodule``; a DataModule and loaders at once (in
    ``dataloaders`` or ``more_loaders``, such as fit's validation loaders) is an error."""
    if isinstance(dataloaders, DataModule):
        datamodule, dataloaders = dataloaders, None
    if datamodule is not None and any(loaders is not None for loaders in (dataloaders, *more_loaders)):
        raise MisconfigurationError(
            f"trainer.{entry} got dataloaders and a datamodule: pass dataloaders= or datamodule=, not both."
        )
    return datamodule, dataloaders


def model_to_run(entry: str, model: Any, last_model: Module | None, datamodule: Any) -> Module:
    """The Module a ``fit``/``validate``/``test``/``predict`` call runs: ``model``, else the last run's; a model or
    a datamodule of the wrong type is an error naming the call."""
    if model is None:
        if last_model is None:
            raise TypeError(f"trainer.{entry}() needs a model: pass one, or call trainer.fit(model) first.")
        model = last_model
    if not isinstance(model, Module):
        raise TypeError(f"trainer.{entry}(model={describe(model)}): the model must subclass framework.Module.")
    if datamodule is not None and not isinstance(datamodule, DataModule):
        raise TypeError(f"trainer.{entry}(datamodule={describe(datamodule)}): it must subclass framework.DataModule.")
    return model
