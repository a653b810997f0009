"""``Settings``: the Trainer's value arguments, checked once and frozen, and the one function that builds them.

What a run is allowed to do (epochs, limits, logging interval, clipping ...) is read from here by the loops, through
their :class:`framework.trainer.run.Run`. The Trainer shows each field under its Lightning name
(``trainer.max_epochs``); a callback that sets one (``trainer.accumulate_grad_batches = 4``, as
``GradientAccumulationScheduler`` does) gets a new ``Settings`` with that field replaced, which the running loops
see from their next read. The objects among the arguments (strategy, precision, loggers, callbacks, profiler,
plugins) are not settings: the Trainer builds them.

Example::

    settings = build_settings({"max_epochs": 3, "limit_val_batches": 0.5})
    settings.max_epochs, settings.limit_val_batches, settings.log_every_n_steps   # 3, 0.5, 50
"""

from __future__ import annotations

import dataclasses
import math
from datetime import timedelta
from typing import Any

from framework import console
from framework.duration import parse_duration
from framework.trainer import arguments as check

#: What ``max_epochs=None`` means when nothing else bounds training, as in Lightning.
DEFAULT_MAX_EPOCHS = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """The checked value arguments of one Trainer (see ``Trainer`` for what each means)."""

    fast_dev_run: int = 0
    max_epochs: int | None = None
    min_epochs: int | None = None
    max_steps: int = -1
    min_steps: int | None = None
    max_time: timedelta | None = None
    limit_train_batches: int | float = 1.0
    limit_val_batches: int | float = 1.0
    limit_test_batches: int | float = 1.0
    limit_predict_batches: int | float = 1.0
    overfit_batches: int | float = 0.0
    val_check_interval: int | float = 1.0
    check_val_every_n_epoch: int | None = 1
    num_sanity_val_steps: int = 2
    log_every_n_steps: int = 50
    enable_checkpointing: bool = True
    enable_progress_bar: bool = True
    enable_model_summary: bool = True
    accumulate_grad_batches: int = 1
    gradient_clip_val: float | None = None
    gradient_clip_algorithm: str | None = None
    deterministic: bool | str | None = None
    benchmark: bool | None = None
    inference_mode: bool = True
    use_distributed_sampler: bool = True
    detect_anomaly: bool = False
    barebones: bool = False
    sync_batchnorm: bool = False
    reload_dataloaders_every_n_epochs: int = 0
    default_root_dir: str = ""
    enable_autolog_hparams: bool = True
    auto_resume: bool = True

    def epoch_limit(self, has_timer: bool) -> int:
        """``max_epochs`` as training applies it (-1: no limit). ``max_epochs=None`` means 1000 epochs, or no limit
        where ``max_steps``, ``max_time`` or a ``Timer`` (``has_timer``) bounds the run (Lightning's rule)."""
        if self.max_epochs is not None:
            return self.max_epochs
        if self.max_steps != -1 or self.max_time is not None or has_timer:
            return -1
        return DEFAULT_MAX_EPOCHS

    @property
    def sanity_steps(self) -> float:
        """Validation batches per loader in the sanity check (infinity for ``num_sanity_val_steps=-1``)."""
        return math.inf if self.num_sanity_val_steps == -1 else self.num_sanity_val_steps


#: The Settings fields, which the Trainer shows as attributes of its own.
SETTING_NAMES = tuple(field.name for field in dataclasses.fields(Settings))


class SettingView:
    """A Trainer attribute showing the field of the same name of its ``Settings`` (``trainer.max_epochs``);
    setting it replaces that field, for the run under way too (``Trainer.replace_settings``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.__doc__ = f"The Trainer's ``{name}`` setting (``trainer.settings.{name}``)."

    def __get__(self, trainer: Any, owner: type | None = None) -> Any:
        if trainer is None:
            return self
        return getattr(trainer.settings, self.name)

    def __set__(self, trainer: Any, value: Any) -> None:
        trainer.replace_settings(**{self.name: value})


def build_settings(given: dict[str, Any], announce: bool = False) -> Settings:
    """Check every value argument in ``given`` (the Trainer's keyword arguments; those missing take the Trainer's
    defaults) and return them as ``Settings``. ``announce``: say what ``barebones`` turns off and what a batch
    limit of 1 means (global rank 0 only).

    A bad value raises ``MisconfigurationError`` naming the argument, the value and what is accepted.
    """
    given = {**_TRAINER_DEFAULTS, **given}
    if check.check_bool("barebones", given["barebones"]):
        given.update(_barebones(given, announce))
    values: dict[str, Any] = {
        "auto_resume": check.check_bool("auto_resume", given["auto_resume"]),
        "fast_dev_run": check.check_fast_dev_run(given["fast_dev_run"]),
        "max_steps": check.check_int("max_steps", given["max_steps"], -1),
        "min_steps": check.check_int("min_steps", given["min_steps"], 0, none_means=None),
        "max_time": parse_duration("Trainer", "max_time", given["max_time"]),
        # None stays None, as in Lightning; training applies it as 1000 epochs or none (epoch_limit).
        "max_epochs": check.check_int("max_epochs", given["max_epochs"], -1, none_means=None),
        "min_epochs": check.check_int("min_epochs", given["min_epochs"], 0, none_means=None),
    }
    max_epochs = -1 if values["max_epochs"] is None else values["max_epochs"]
    check.check_order("min_epochs", values["min_epochs"], "max_epochs", max_epochs)
    check.check_order("min_steps", values["min_steps"], "max_steps", values["max_steps"])
    for name in _LIMITS:
        values[name] = check.check_limit(name, given[name])
    every_n = check.check_int("check_val_every_n_epoch", given["check_val_every_n_epoch"], 1, None)
    values["check_val_every_n_epoch"] = every_n
    values["val_check_interval"] = check.check_val_check_interval(given["val_check_interval"], every_n)
    if announce:
        check.note_one_or_all(**{name: given[name] for name in (*_LIMITS, "val_check_interval")})
    values.update(_counts_and_switches(given))
    settings = Settings(**values)
    return _fast_dev_run(settings) if settings.fast_dev_run else settings


def apply_torch_flags(settings: Settings) -> None:
    """Set torch's switches that ``deterministic`` and ``benchmark`` ask for (None leaves torch's own)."""
    import torch

    if settings.deterministic is not None:
        torch.use_deterministic_algorithms(bool(settings.deterministic), warn_only=settings.deterministic == "warn")
    if settings.benchmark is not None and torch.backends.cudnn.is_available():
        torch.backends.cudnn.benchmark = settings.benchmark


def _counts_and_switches(given: dict[str, Any]) -> dict[str, Any]:
    algorithm = given["gradient_clip_algorithm"]
    return {
        "num_sanity_val_steps": check.check_int("num_sanity_val_steps", given["num_sanity_val_steps"], -1, 2),
        "log_every_n_steps": check.check_int("log_every_n_steps", given["log_every_n_steps"], 0, 50),
        "accumulate_grad_batches": check.check_int("accumulate_grad_batches", given["accumulate_grad_batches"], 1),
        "gradient_clip_val": check.check_optional_number("gradient_clip_val", given["gradient_clip_val"]),
        # None stays None, as in Lightning (configure_gradient_clipping receives it); clipping reads it as "norm".
        "gradient_clip_algorithm": check.check_choice(
            "gradient_clip_algorithm", algorithm.lower() if isinstance(algorithm, str) else algorithm,
            (None, "norm", "value")),
        "reload_dataloaders_every_n_epochs": check.check_int(
            "reload_dataloaders_every_n_epochs", given["reload_dataloaders_every_n_epochs"], 0),
        "deterministic": check.check_choice("deterministic", given["deterministic"], (None, True, False, "warn")),
        "benchmark": check.check_choice("benchmark", given["benchmark"], (None, True, False)),
        **{name: check.check_bool(name, given[name]) for name in _SWITCHES},
        **{name: check.check_bool(name, True if given[name] is None else given[name]) for name in _ENABLES},
        "default_root_dir": check.check_root_dir(given["default_root_dir"]),
        "enable_autolog_hparams": check.check_bool("enable_autolog_hparams", given["enable_autolog_hparams"]),
    }


def _barebones(given: dict[str, Any], announce: bool) -> dict[str, Any]:
    names = ("enable_checkpointing", "logger", "enable_progress_bar", "log_every_n_steps", "enable_model_summary",
             "num_sanity_val_steps")
    imposed = check.barebones_settings(**{name: given[name] for name in (*names, "fast_dev_run", "detect_anomaly")})
    if announce:
        console.info("Trainer(barebones=True): checkpointing, logging, the progress bar, the model summary "
                           "and the sanity check are off, to measure the Trainer's own speed.")
    return dict(zip(names, imposed, strict=True))


def _fast_dev_run(settings: Settings) -> Settings:
    """``fast_dev_run=n``: n batches of each loop, one epoch, no sanity check (its loggers are the Trainer's)."""
    n = settings.fast_dev_run
    return dataclasses.replace(
        settings, limit_train_batches=n, limit_val_batches=n, limit_test_batches=n, limit_predict_batches=n,
        max_steps=n, max_epochs=1, num_sanity_val_steps=0, val_check_interval=1.0, check_val_every_n_epoch=1)


_LIMITS = ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches",
           "overfit_batches")
_SWITCHES = ("inference_mode", "use_distributed_sampler", "detect_anomaly", "barebones", "sync_batchnorm")
_ENABLES = ("enable_checkpointing", "enable_progress_bar", "enable_model_summary")
# The Trainer's defaults for what build_settings reads, where a caller leaves them out.
_TRAINER_DEFAULTS: dict[str, Any] = {
    "fast_dev_run": False, "max_epochs": None, "min_epochs": None, "max_steps": -1, "min_steps": None,
    "max_time": None, "limit_train_batches": None, "limit_val_batches": None, "limit_test_batches": None,
    "limit_predict_batches": None, "overfit_batches": 0.0, "val_check_interval": None, "check_val_every_n_epoch": 1,
    "num_sanity_val_steps": None, "log_every_n_steps": None, "enable_checkpointing": None,
    "enable_progress_bar": None, "enable_model_summary": None, "accumulate_grad_batches": 1,
    "gradient_clip_val": None, "gradient_clip_algorithm": None, "deterministic": None, "benchmark": None,
    "inference_mode": True, "use_distributed_sampler": True, "detect_anomaly": False, "barebones": False,
    "sync_batchnorm": False, "reload_dataloaders_every_n_epochs": 0, "default_root_dir": None,
    "enable_autolog_hparams": True, "auto_resume": True, "logger": None,
}
