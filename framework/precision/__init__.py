"""Precision modes: how forward, backward and the optimizer step handle dtypes."""

from framework.precision.base import Precision
from framework.precision.registry import register_precision, resolve_precision

__all__ = ["Precision", "register_precision", "resolve_precision"]
