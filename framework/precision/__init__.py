"""Precision modes: how forward, backward and the optimizer step handle dtypes."""

from framework.precision.amp import BFloat16Mixed, Float16Mixed, MixedPrecision
from framework.precision.base import Precision
from framework.precision.registry import register_precision, resolve_precision
from framework.precision.true import BFloat16True, Float16True, Float64True, TruePrecision

__all__ = [
    "BFloat16Mixed",
    "BFloat16True",
    "Float16Mixed",
    "Float16True",
    "Float64True",
    "MixedPrecision",
    "Precision",
    "TruePrecision",
    "register_precision",
    "resolve_precision",
]
