"""Lightning's ``fabric.utilities.logger`` helpers that loggers written for Lightning import.

Example::

    _add_prefix({"loss": 0.5}, "train", "/")          # {"train/loss": 0.5}
    _flatten_dict({"optim": {"lr": 0.1}})              # {"optim/lr": 0.1}
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Mapping, MutableMapping
from typing import Any

from framework.loggers.base import with_prefix

__all__ = ["_add_prefix", "_convert_params", "_flatten_dict", "_sanitize_callable_params", "_sanitize_params"]


def _add_prefix(metrics: Mapping[str, Any], prefix: str, separator: str) -> dict[str, Any]:
    """``metrics`` with ``prefix`` and ``separator`` before each name (unchanged without a prefix)."""
    return with_prefix(dict(metrics), prefix, separator)


def _convert_params(params: Mapping[str, Any] | Namespace | None) -> dict[str, Any]:
    """``params`` as a dict (from a Namespace, or ``{}`` for None)."""
    if params is None:
        return {}
    return dict(vars(params)) if isinstance(params, Namespace) else dict(params)


def _flatten_dict(params: MutableMapping[Any, Any], delimiter: str = "/", parent_key: str = "") -> dict[str, Any]:
    """Nested dicts (and Namespaces) as one level, their keys joined by ``delimiter``."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{parent_key}{delimiter}{key}" if parent_key else str(key)
        value = vars(value) if isinstance(value, Namespace) else value
        if isinstance(value, MutableMapping) and value:
            flat.update(_flatten_dict(value, delimiter, name))
        else:
            flat[name] = value
    return flat


def _sanitize_callable_params(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with each callable replaced by its name."""
    return {key: getattr(value, "__name__", repr(value)) if callable(value) else value for key, value in params.items()}


def _sanitize_params(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with values a logger cannot show (lists, tensors, other objects) as strings."""
    plain = (bool, int, float, str)
    return {key: value if value is None or isinstance(value, plain) else str(value) for key, value in params.items()}
