"""Turns what users type for ``strategy=`` into a Strategy object."""

from __future__ import annotations

from collections.abc import Callable

from framework.errors import MisconfigurationError, describe
from framework.strategies.base import Strategy
from framework.strategies.single import SingleDeviceStrategy

_BUILDERS: dict[str, Callable[[], Strategy]] = {"single": SingleDeviceStrategy}
_ALIASES: dict[str, str] = {"auto": "single", "single_device": "single"}


def register_strategy(name: str, builder: Callable[[], Strategy], aliases: tuple[str, ...] = ()) -> None:
    """Make ``strategy=name`` (and each alias) build ``builder()``."""
    _BUILDERS[name] = builder
    for alias in aliases:
        _ALIASES[alias] = name


def resolve_strategy(strategy: object) -> Strategy:
    """A Strategy instance for ``strategy`` (an instance, or a registered name)."""
    if isinstance(strategy, Strategy):
        return strategy
    if isinstance(strategy, str):
        name = _ALIASES.get(strategy.lower(), strategy.lower())
        if name in _BUILDERS:
            return _BUILDERS[name]()
    accepted = ", ".join(repr(n) for n in sorted({*_BUILDERS, *_ALIASES}))
    raise MisconfigurationError(
        f"strategy={describe(strategy)} is not a known strategy. Accepted: {accepted}, or a Strategy instance."
    )
