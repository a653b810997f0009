"""Durations users type: ``"DD:HH:MM:SS"``, a ``timedelta``, or a dict such as ``{"hours": 1}``."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from framework.errors import MisconfigurationError, describe

_DURATION = re.compile(r"^(\d+):(\d+):(\d+):(\d+)$")


def parse_duration(owner: str, name: str, value: Any) -> timedelta | None:
    """``value`` as a positive timedelta (None stays None); ``owner(name=...)`` is how errors call it.

    Example::

        parse_duration("Trainer", "max_time", "00:12:00:00")    # timedelta(hours=12)
    """
    if value is None:
        return None
    duration = None
    if isinstance(value, timedelta):
        duration = value
    elif isinstance(value, str):
        match = _DURATION.match(value.strip())
        if match:
            days, hours, minutes, seconds = map(int, match.groups())
            duration = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    elif isinstance(value, dict):
        try:
            duration = timedelta(**value)
        except TypeError:
            pass
    if duration is None or duration.total_seconds() <= 0:
        raise MisconfigurationError(
            f"{owner}({name}={describe(value)}): accepted a positive duration: a string 'DD:HH:MM:SS', "
            "a datetime.timedelta, or a dict such as {'hours': 1}."
        )
    return duration
