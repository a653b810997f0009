"""The forms ``configure_optimizers`` may return, parsed into optimizers and ``LRSchedulerConfig`` objects, and the
checks of those configs against how the Module optimizes.

Example::

    optimizers, configs = parse_optimizers({"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler,
                                                                                     "interval": "step"}})
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from torch.optim import Optimizer

from framework import console
from framework.errors import MisconfigurationError, describe
from framework.utilities.types import LRSchedulerConfig

ACCEPTED_FORMS = """configure_optimizers may return:
  - an optimizer
  - a list or tuple of optimizers
  - a tuple of two lists: ([optimizers], [lr_schedulers])
  - a dict {"optimizer": optimizer, "lr_scheduler": scheduler or scheduler config}
  - a list or tuple of such dicts
  - None (only with manual optimization)
A scheduler config is a dict {"scheduler": scheduler, "interval": "step" or "epoch", "frequency": int,
"monitor": "metric name" (needed by ReduceLROnPlateau), "strict": bool, "name": str}."""

_CONFIG_KEYS = {"scheduler", "interval", "frequency", "monitor", "strict", "name", "reduce_on_plateau"}


def parse_optimizers(returned: Any) -> tuple[list[Optimizer], list[LRSchedulerConfig]]:
    """The optimizers and scheduler configs in whatever ``configure_optimizers`` returned."""
    if returned is None:
        return [], []
    if _is_optimizer(returned):
        return [returned], []
    if isinstance(returned, Mapping):
        return _parse_dicts([returned])
    if isinstance(returned, (list, tuple)):
        items = list(returned)
        if not items:
            raise _bad_form(returned)
        if all(_is_optimizer(item) for item in items):
            return items, []
        if all(isinstance(item, Mapping) for item in items):
            return _parse_dicts(items)
        if len(items) == 2 and isinstance(items[0], (list, tuple)) and isinstance(items[1], (list, tuple)):
            optimizers = list(items[0])
            if not optimizers or not all(_is_optimizer(o) for o in optimizers):
                raise _bad_form(returned)
            return optimizers, [_scheduler_config(s) for s in items[1]]
        if len(items) == 2 and _is_optimizer(items[0]):
            # (optimizer, scheduler) without lists — Lightning rejects it, but the intent is unambiguous.
            return [items[0]], [_scheduler_config(items[1])]
    raise _bad_form(returned)


def _parse_dicts(items: Sequence[Mapping]) -> tuple[list[Optimizer], list[LRSchedulerConfig]]:
    optimizers, configs = [], []
    for item in items:
        if "optimizer" not in item or not _is_optimizer(item["optimizer"]):
            raise _bad_form(item)
        _refuse_unknown_keys("optimizer dict", item, {"optimizer", "lr_scheduler", "monitor"})
        optimizers.append(item["optimizer"])
        if item.get("lr_scheduler") is not None:
            configs.append(_scheduler_config(item["lr_scheduler"], monitor=item.get("monitor")))
    return optimizers, configs


def _scheduler_config(value: Any, monitor: str | None = None) -> LRSchedulerConfig:
    """``value`` as a config; ``monitor`` is the one given beside it (``{"optimizer", "lr_scheduler", "monitor"}``)."""
    if isinstance(value, Mapping):
        if "scheduler" not in value:
            raise MisconfigurationError(
                f"LR scheduler config {dict(value)!r} is not valid: it needs a 'scheduler' key. "
                f"Accepted keys: {sorted(_CONFIG_KEYS - {'reduce_on_plateau'})}."
            )
        _refuse_unknown_keys("LR scheduler config", value, _CONFIG_KEYS)  # "reduce_on_plateau": Lightning 1.x's
        config = LRSchedulerConfig(**{key: value[key] for key in value if key in _CONFIG_KEYS - {"reduce_on_plateau"}})
    else:
        config = LRSchedulerConfig(scheduler=value)
    if config.monitor is None:
        config.monitor = monitor
    if config.interval not in ("step", "epoch"):
        raise MisconfigurationError(
            f"LR scheduler config interval={config.interval!r} is not valid; accepted: 'step', 'epoch'."
        )
    if not isinstance(config.frequency, int) or config.frequency < 1:
        raise MisconfigurationError(f"LR scheduler config frequency={config.frequency!r} must be a positive int.")
    config.reduce_on_plateau = _is_plateau(config.scheduler)
    return config


def check_schedulers(configs: list[LRSchedulerConfig], automatic: bool, steps_itself: bool) -> None:
    """In automatic optimization the Trainer steps the schedulers: each needs a ``step()`` (or the Module's
    ``lr_scheduler_step`` override, ``steps_itself``), and a ReduceLROnPlateau a metric to step by. In manual
    optimization the user steps every scheduler, so a monitor given is ignored, with Lightning's warning."""
    for config in configs:
        if automatic and not steps_itself and not callable(getattr(config.scheduler, "step", None)):
            raise MisconfigurationError(
                f"LR scheduler {describe(config.scheduler)} has no step() method, so the Trainer cannot step it. "
                "Override the Module's lr_scheduler_step(scheduler, metric) to step it your way, or step it "
                "yourself under manual optimization."
            )
        if automatic and config.reduce_on_plateau and config.monitor is None:
            raise MisconfigurationError(
                "ReduceLROnPlateau needs a metric to monitor: return {'optimizer': opt, 'lr_scheduler': "
                "{'scheduler': scheduler, 'monitor': 'val_loss'}} from configure_optimizers."
            )
        if not automatic and config.monitor is not None:
            console.warn_user("The lr scheduler dict contains the key(s) ['monitor'], but the keys will be ignored. "
                              "You need to call `lr_scheduler.step()` manually in manual optimization.",
                              RuntimeWarning)


def _refuse_unknown_keys(what: str, given: Mapping, known: set[str]) -> None:
    """An unknown key is an error naming the key probably meant (Lightning only warns, so a typo such as
    "intervall" would train with the wrong schedule)."""
    unknown = sorted(set(given) - known, key=str)
    if not unknown:
        return
    hints = [f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
             for key in unknown for close in [difflib.get_close_matches(str(key), sorted(known), n=1)]]
    raise MisconfigurationError(
        f"configure_optimizers: the {what} has unknown keys {', '.join(hints)}. Accepted keys: {sorted(known)}."
    )


def _is_plateau(scheduler: Any) -> bool:
    from torch.optim.lr_scheduler import ReduceLROnPlateau

    return isinstance(scheduler, ReduceLROnPlateau)


def _is_optimizer(value: Any) -> bool:
    return isinstance(value, Optimizer) or (hasattr(value, "step") and hasattr(value, "param_groups"))


def _bad_form(value: Any) -> MisconfigurationError:
    return MisconfigurationError(
        f"configure_optimizers returned {describe(value)}, which is not understood.\n{ACCEPTED_FORMS}"
    )
