"""Helpers Lightning code imports from ``lightning.pytorch.utilities``, under the same names.

Example::

    from framework.utilities import grad_norm, rank_zero_only
"""

from __future__ import annotations

from framework.hparams import AttributeDict
from framework.utilities.grads import grad_norm
from framework.utilities.rank_zero import (
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)

__all__ = [
    "AttributeDict",
    "grad_norm",
    "rank_zero_debug",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
]
