"""The warning category Lightning code filters on: ``PossibleUserWarning``."""

from __future__ import annotations

import warnings


class PossibleUserWarning(UserWarning):
    """A setting that is probably a mistake but may be deliberate (e.g. too few data-loading workers).

    Example::

        import warnings
        warnings.filterwarnings("ignore", category=PossibleUserWarning)
    """


def disable_possible_user_warnings(module: str = "") -> None:
    """Silence ``PossibleUserWarning`` (from ``module`` only, when given: a regular expression on the module name)."""
    warnings.filterwarnings("ignore", category=PossibleUserWarning, module=module)


__all__ = ["PossibleUserWarning", "disable_possible_user_warnings"]
