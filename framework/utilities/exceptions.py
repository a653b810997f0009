"""Lightning's exception names, for code that catches them: ``MisconfigurationException``."""

from __future__ import annotations

from framework.errors import MisconfigurationError

#: Lightning's name for :class:`framework.MisconfigurationError`.
MisconfigurationException = MisconfigurationError

__all__ = ["MisconfigurationException"]
