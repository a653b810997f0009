"""Checks of the values users pass, for every layer: each bad value is a ``MisconfigurationError`` that names the
owner and the argument, shows the value and its type, and says what is accepted.

Example::

    patience = check_int("EarlyStopping", "patience", patience, minimum=0)
    # EarlyStopping(patience=-1 (type int)): accepted is an int >= 0.
"""

from __future__ import annotations

from typing import Any

from framework.errors import MisconfigurationError, describe

#: ``none_means`` of ``check_int``: None is refused.
REFUSE_NONE = object()


def bad_value(owner: str, name: str, value: Any, accepted: str) -> MisconfigurationError:
    """The error for ``owner(name=value)``: ``accepted`` says what would have been taken."""
    return MisconfigurationError(f"{owner}({name}={describe(value)}): accepted {accepted}.")


def is_int(value: Any) -> bool:
    """Whether ``value`` is an int and not a bool (``True`` is an int to Python, never a count to a user)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float and not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_bool(owner: str, name: str, value: Any) -> bool:
    """``value``, which must be exactly True or False."""
    if not isinstance(value, bool):
        raise bad_value(owner, name, value, "True or False")
    return value


def check_int(owner: str, name: str, value: Any, minimum: int, none_means: Any = REFUSE_NONE,
              meaning: str = "") -> Any:
    """An int >= ``minimum``; None becomes ``none_means`` unless that is ``REFUSE_NONE``. ``meaning`` adds to the
    error what the values mean (``" (0 turns it off)"``)."""
    if value is None and none_means is not REFUSE_NONE:
        return none_means
    if not is_int(value) or value < minimum:
        or_none = " or None" if none_means is not REFUSE_NONE else ""
        raise bad_value(owner, name, value, f"is an int >= {minimum}{or_none}{meaning}")
    return value


def check_number(owner: str, name: str, value: Any, minimum: float = 0.0, allow_none: bool = False) -> float | None:
    """``value`` as a float >= ``minimum`` (nan is refused); None too where ``allow_none``."""
    if value is None and allow_none:
        return None
    if not is_number(value) or not value >= minimum:  # refuses nan
        raise bad_value(owner, name, value, f"a number >= {minimum}" + (" or None" if allow_none else ""))
    return float(value)


def check_choice(owner: str, name: str, value: Any, choices: tuple) -> Any:
    """``value`` when it is one of ``choices``, compared by type too (``1`` does not pass for ``True``)."""
    if not any(value is choice or (type(value) is type(choice) and value == choice) for choice in choices):
        raise bad_value(owner, name, value, "one of " + ", ".join(repr(c) for c in choices))
    return value


def check_list_of(owner: str, name: str, value: Any, kind: type, noun: str) -> list:
    """``value`` (one ``kind`` instance or a list/tuple of them) as a list; None gives ``[]``."""
    if value is None:
        return []
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if not isinstance(item, kind):
            raise bad_value(owner, name, item, f"a {noun} instance or a list of them (got an item that is not)")
    return items
