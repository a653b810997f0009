"""The callbacks and loggers a Trainer adds by itself, from its flags, as Lightning does."""

from __future__ import annotations

import importlib.util
from datetime import timedelta
from typing import Any

from framework.callbacks import Checkpoint, ModelCheckpoint, ModelSummary, ProgressBar, Timer, TQDMProgressBar
from framework.callbacks.base import Callback
from framework.errors import MisconfigurationError, describe
from framework.loggers import CSVLogger, Logger, TensorBoardLogger
from framework.loggers.base import DummyLogger
from framework.trainer.hook_runner import check_state_keys
from framework.trainer.settings import Settings
from framework.utilities.rank_zero import rank_zero_info


def with_default_callbacks(callbacks: list[Callback], enable_checkpointing: bool, enable_progress_bar: bool,
                           enable_model_summary: bool, max_time: timedelta | None = None) -> list[Callback]:
    """``callbacks`` plus a ModelCheckpoint, a TQDMProgressBar and a ModelSummary where the flags ask for
    them and none was given, and the Timer that ``max_time`` asks for; checkpoint-saving callbacks last.
    Contradicting flags are errors."""
    callbacks = list(callbacks)
    if max_time is not None:  # as in Lightning, a Timer measures it: trainer.callbacks has it, and resuming counts on
        if any(isinstance(cb, Timer) for cb in callbacks):
            rank_zero_info("Ignoring `Trainer(max_time=...)`, callbacks list already contains a Timer (its "
                           "duration bounds the run).")
        else:
            callbacks.append(Timer(duration=max_time, interval="step"))
    given_checkpoints = [cb for cb in callbacks if isinstance(cb, Checkpoint)]  # any one replaces the default
    if given_checkpoints and not enable_checkpointing:
        raise MisconfigurationError(
            f"Trainer(enable_checkpointing=False) was given together with {type(given_checkpoints[0]).__name__} "
            "in callbacks; remove one of them."
        )
    if enable_checkpointing and not given_checkpoints:
        callbacks.append(ModelCheckpoint())
    bars = [cb for cb in callbacks if isinstance(cb, ProgressBar)]
    if len(bars) > 1:
        raise MisconfigurationError(f"Trainer got {len(bars)} progress bar callbacks; give at most one.")
    if bars and not enable_progress_bar:
        raise MisconfigurationError(
            f"Trainer(enable_progress_bar=False) was given together with {type(bars[0]).__name__} in callbacks; "
            "remove one of them."
        )
    if enable_progress_bar and not bars:
        callbacks.append(TQDMProgressBar())
    if enable_model_summary and not any(isinstance(cb, ModelSummary) for cb in callbacks):
        callbacks.append(ModelSummary())
    check_state_keys(callbacks)
    return sorted(callbacks, key=lambda cb: cb.runs_last)


def default_loggers(root_dir: str) -> list[Logger]:
    """``logger=True``: a TensorBoardLogger when tensorboard is installed, else a CSVLogger, under ``root_dir``."""
    if importlib.util.find_spec("tensorboard") is not None:
        return [TensorBoardLogger(root_dir)]
    return [CSVLogger(root_dir)]


def resolve_loggers(logger: Any, settings: Settings) -> list[Logger]:
    """The loggers ``Trainer(logger=)`` asks for: ``None``/``True`` the default one, ``False`` none, a Logger (or
    any object that logs like one, as Lightning takes) or a list; none with ``barebones``, and a ``DummyLogger``
    under ``fast_dev_run`` (as in Lightning: no files are written, but ``trainer.logger`` stays usable)."""
    if settings.barebones:
        logger = False
    if logger is None or logger is True:
        loggers = default_loggers(settings.default_root_dir)
    elif logger is False:
        loggers = []
    else:
        loggers = list(logger) if isinstance(logger, (list, tuple)) else [logger]
        for item in loggers:
            if not isinstance(item, Logger) and not callable(getattr(item, "log_metrics", None)):
                raise MisconfigurationError(f"Trainer(logger={describe(item)}): accepted True, False, a Logger (or "
                                            "an object with log_metrics) or a list of them.")
    if settings.fast_dev_run:
        return [DummyLogger()] if logger is not False and logger != [] else []
    return loggers
