"""``mode``: how a monitored value gets better, for every callback that watches one (checkpointing, early
stopping, spike detection): ``"min"`` (lower is better) or ``"max"``."""

from __future__ import annotations

from typing import Any

import torch

from framework.checks import bad_value

#: For each mode, whether a value is better than another: ``IMPROVES[mode](new, best)``.
IMPROVES = {"min": torch.lt, "max": torch.gt}


def check_mode(owner: str, mode: Any) -> str:
    """``mode`` when it is ``"min"`` or ``"max"``; else an error naming ``owner``."""
    if not isinstance(mode, str) or mode not in IMPROVES:
        raise bad_value(owner, "mode", mode, "'min' or 'max'")
    return mode
