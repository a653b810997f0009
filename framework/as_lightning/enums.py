"""Lightning's ``LightningEnum``: a string enum compared with strings, ignoring case.

Example::

    class Mode(LightningEnum):
        FAST = "fast"

    Mode.FAST == "FAST"             # True
    Mode.from_str("fast")           # Mode.FAST
"""

from __future__ import annotations

from enum import Enum
from typing import Any

__all__ = ["LightningEnum"]


class LightningEnum(str, Enum):
    """A string enum whose members equal their value in any case."""

    @classmethod
    def from_str(cls, value: str, source: str = "key") -> LightningEnum:
        """The member named ``value`` (``source="key"``) or with that value (``"value"``), in any case."""
        for member in cls:
            candidate = member.name if source == "key" else member.value
            if candidate.lower() == value.lower():
                return member
        raise ValueError(f"{cls.__name__}.from_str({value!r}): accepted are {[member.value for member in cls]}.")

    def __eq__(self, other: object) -> bool:
        other = other.value if isinstance(other, Enum) else other
        return isinstance(other, str) and self.value.lower() == other.lower()

    def __hash__(self) -> int:
        return hash(self.value.lower())

    def __repr__(self) -> Any:
        return f"{type(self).__name__}.{self.name}"
