"""Durations users type: ``"DD:HH:MM:SS"``, a ``timedelta``, or a dict such as ``{"hours": 1}``."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from framework.errors import MisconfigurationError, describe

_DURATION = re.compile(r"^(\d+):(\d+):(\d+):(\d+)$")


def parse_duration(owner: str, name: str, value: Any) -> timedelta | None:
    """``value`` as a timedelta of zero or more (None stays None); ``owner(name=...)`` is how errors call it.

    A number is seconds. Zero is allowed, as in Lightning: the time is up at the first check.

    Example:

    >>> parse_duration("Trainer", "max_time", "00:12:00:00")
    datetime.timedelta(seconds=43200)
    >>> parse_duration("Timer", "duration", {"minutes": 90})
    datetime.timedelta(seconds=5400)
    """
    if value is None:
        return None
    duration = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        duration = timedelta(seconds=value) if value >= 0 else None
    elif isinstance(value, timedelta):
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
    if duration is None or duration.total_seconds() < 0:
        raise MisconfigurationError(
            f"{owner}({name}={describe(value)}): accepted a duration of zero or more: a string 'DD:HH:MM:SS', "
            "a datetime.timedelta, a dict such as {'hours': 1}, or a number of seconds."
        )
    return duration
