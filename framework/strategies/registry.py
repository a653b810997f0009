"""Turns what users type for ``strategy=`` into a Strategy object."""

from __future__ import annotations

from collections.abc import Callable

from framework.errors import MisconfigurationError, describe
from framework.strategies.base import Strategy
from framework.strategies.ddp import DDPStrategy
from framework.strategies.single import SingleDeviceStrategy

_BUILDERS: dict[str, Callable[[], Strategy]] = {
    "single": SingleDeviceStrategy,
    "ddp": DDPStrategy,
    "ddp_spawn": lambda: DDPStrategy(start_method="spawn"),
    "ddp_fork": lambda: DDPStrategy(start_method="fork"),
}
# "auto" is decided by the Runtime, which knows how many devices there are.
_ALIASES: dict[str, str] = {"single_device": "single", "ddp_notebook": "ddp_fork"}


def register_strategy(name: str, builder: Callable[[], Strategy], aliases: tuple[str, ...] = ()) -> None:
    """Make ``strategy=name`` (and each alias) build ``builder()``."""
    _BUILDERS[name] = builder
    for alias in aliases:
        _ALIASES[alias] = name


def resolve_strategy(strategy: object) -> Strategy:
    """A Strategy instance for ``strategy`` (an instance, or a registered name)."""
    if isinstance(strategy, Strategy):
        return strategy
    if isinstance(strategy, str) and strategy.lower() == "auto":
        return SingleDeviceStrategy()
    if isinstance(strategy, str):
        name = _ALIASES.get(strategy.lower(), strategy.lower())
        if name in _BUILDERS:
            return _BUILDERS[name]()
    accepted = ", ".join(repr(n) for n in sorted({"auto", *_BUILDERS, *_ALIASES}))
    raise MisconfigurationError(
        f"strategy={describe(strategy)} is not a known strategy. Accepted: {accepted}, or a Strategy instance."
    )
