"""The warning category Lightning code filters on: ``PossibleUserWarning``."""

from __future__ import annotations


class PossibleUserWarning(UserWarning):
    """A setting that is probably a mistake but may be deliberate (e.g. too few data-loading workers).

    Example::

        import warnings
        warnings.filterwarnings("ignore", category=PossibleUserWarning)
    """
