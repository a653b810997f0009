"""A Runtime's callbacks and loggers, as Fabric has them: any objects, called by hook name, logged to on rank 0.

The Runtime does not know the Trainer's ``Callback`` or ``Logger`` classes: a callback is any
object whose method names match what the loop passes to ``runtime.call``, and a logger is
any object with ``log_metrics(metrics, step)`` (the classes in ``framework.loggers`` are such).
"""

from __future__ import annotations

import atexit
import functools
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

import torch


def as_list(objects: Any) -> list[Any]:
    """``None`` as ``[]``, one object as ``[object]``, a list or tuple as a list."""
    if objects is None:
        return []
    return list(objects) if isinstance(objects, (list, tuple)) else [objects]


def call_hook(callbacks: list[Any], hook_name: str, args: tuple, kwargs: dict[str, Any]) -> None:
    """``callback.<hook_name>(*args, **kwargs)`` for each callback that has such a method.

    Keyword arguments a callback's method does not take are left out for that callback, so
    callbacks may take different subsets of what the loop passes.
    """
    for callback in callbacks:
        method = getattr(callback, hook_name, None)
        if callable(method):
            method(*args, **_accepted(method, kwargs))


def _accepted(method: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    if not kwargs:
        return kwargs
    function = getattr(method, "__func__", method)
    try:
        names = _keyword_names(function)
    except TypeError:  # an unhashable callable object: not cached
        names = _keyword_names.__wrapped__(function)
    return kwargs if names is None else {key: value for key, value in kwargs.items() if key in names}


@functools.lru_cache(maxsize=1024)
def _keyword_names(function: Any) -> frozenset[str] | None:
    """The names ``function`` takes by keyword, or None when it takes any (``**kwargs``, or no signature)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: pass everything
        return None
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return None
    return frozenset(parameter.name for parameter in parameters)


def log_to(loggers: list[Any], metrics: Mapping[str, Any], step: int | None) -> None:
    """Each logger's ``log_metrics`` with ``metrics`` as plain numbers (one-element tensors read once)."""
    plain = {name: _plain(name, value) for name, value in metrics.items()}
    for logger in loggers:
        logger.log_metrics(metrics=plain, step=step)


def _plain(name: str, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"log: the value of {name!r} is a tensor of shape {tuple(value.shape)}; a logger takes one number. "
                "Reduce it first (value.mean()) or log its entries under separate names."
            )
        return value.item()
    return value


def agree_on_runs(loggers: list[Any], broadcast: Callable[[Any], Any]) -> None:
    """Every rank's copy of each logger takes rank 0's run (its version directory ...), where it tells one."""
    states = broadcast([_run_state(logger) for logger in loggers])
    for logger, state in zip(loggers, states, strict=True):
        if state is not None:
            logger.load_run_state(state)


def logs_on_every_rank(logger: Any) -> bool:
    """Whether ``logger`` gets every rank's values, as Lightning gives them: a logger of the user's own whose
    ``log_metrics`` is not ``rank_zero_only``; the framework's own loggers write on global rank 0 only."""
    method = getattr(type(logger), "log_metrics", None)
    if method is None or getattr(method, "__module__", "").startswith("framework."):
        return False
    return not getattr(method, "runs_on_rank_zero_only", False)


def _run_state(logger: Any) -> dict[str, Any] | None:
    run_state = getattr(logger, "run_state", None)  # a logger of the user's own may not have one
    state = run_state() if callable(run_state) else None
    return state if isinstance(state, dict) else None  # a duck-typed logger's (a Mock's) is no run of ours


def finalize(loggers: list[Any], status: str) -> None:
    """Let each logger write what it buffered (``status``: "success", "failed" ...)."""
    for logger in loggers:
        if callable(getattr(logger, "finalize", None)):
            logger.finalize(status)


class LoggerMethods:
    """The Runtime's callbacks and loggers: ``call``, ``log``, ``log_dict``, and the loggers' last write."""

    @property
    def loggers(self) -> list[Any]:
        """The loggers given as ``loggers=``."""
        return self._loggers

    @property
    def logger(self) -> Any:
        """The first logger, or None without loggers."""
        return self._loggers[0] if self._loggers else None

    def call(self, hook_name: str, *args: Any, **kwargs: Any) -> None:
        """Call the method ``hook_name`` of every callback that has one (keyword arguments it does not take left out).

        Example::

            runtime = Runtime(callbacks=[PrintLoss()])
            runtime.call("on_train_batch_end", loss=loss, batch_idx=index)

        :param hook_name: the name of the callbacks' method to call; the other arguments are passed on to it.
        """
        call_hook(self.callbacks, hook_name, args, kwargs)

    def log(self, name: str, value: Any, step: int | None = None) -> None:
        """Send one number (or a one-element tensor) to every logger, on global rank 0.

        :param name: the metric's name.
        :param value: a number or a one-element tensor.
        :param step: the step the loggers record it at; ``None`` (the default): the logger decides.
        """
        self.log_dict({name: value}, step=step)

    def log_dict(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """Send ``metrics`` (numbers or one-element tensors) to every logger, on global rank 0.

        Loggers write what they buffered when the process (or ``launch``'s function) ends.

        :param metrics: names mapped to numbers or one-element tensors.
        :param step: the step the loggers record them at; ``None`` (the default): the logger decides.
        """
        if self._loggers and self.is_global_zero:
            log_to(self._loggers, metrics, step)
            if not self._unflushed_logs:
                self._unflushed_logs = True
                atexit.register(self._finalize_loggers)

    def _finalize_loggers(self, status: str | None = None) -> None:
        """Let the loggers write what they buffered (Fabric leaves that to the user, and loses it when they forget)."""
        if not self._unflushed_logs:
            return
        self._unflushed_logs = False
        if status is None:
            status = "failed" if getattr(sys, "last_value", None) is not None else "success"
        finalize(self._loggers, status)
