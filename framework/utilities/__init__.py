"""Helpers Lightning code imports from ``lightning.pytorch.utilities``, under the same names.

Example::

    from framework.utilities import grad_norm, rank_zero_only
"""

from __future__ import annotations

from framework.hparams import AttributeDict
from framework.utilities.apply_func import apply_to_collection, move_data_to_device
from framework.utilities.combined_loader import CombinedLoader
from framework.utilities.grads import grad_norm
from framework.utilities.rank_zero import (
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)
from framework.utilities.warnings import disable_possible_user_warnings

__all__ = [
    "AttributeDict",
    "CombinedLoader",
    "apply_to_collection",
    "disable_possible_user_warnings",
    "grad_norm",
    "move_data_to_device",
    "rank_zero_debug",
    "rank_zero_deprecation",
    "rank_zero_info",
    "rank_zero_only",
    "rank_zero_warn",
]
