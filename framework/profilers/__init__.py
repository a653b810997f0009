"""Profilers: where a run spends its time, as Lightning's ``lightning.pytorch.profilers``.

Example::

    Trainer(profiler="simple")                 # or "advanced", or a Profiler instance
"""

from typing import Any

from framework.errors import MisconfigurationError, describe
from framework.profilers.advanced import AdvancedProfiler
from framework.profilers.base import PassThroughProfiler, Profiler
from framework.profilers.pytorch import PyTorchProfiler
from framework.profilers.simple import SimpleProfiler

__all__ = [
    "AdvancedProfiler", "PassThroughProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler", "resolve_profiler",
]

_BY_NAME = {"simple": SimpleProfiler, "advanced": AdvancedProfiler, "pytorch": PyTorchProfiler,
            "passthrough": PassThroughProfiler}


def resolve_profiler(profiler: Any) -> Profiler | None:
    """``Trainer(profiler=...)``: None, a name ("simple", "advanced", "pytorch", "passthrough") or a Profiler.

    :raises MisconfigurationError: where ``profiler`` is neither ``None``, a ``Profiler`` nor one of those names.
    """
    if profiler is None or isinstance(profiler, Profiler):
        return profiler
    if isinstance(profiler, str) and profiler.lower() in _BY_NAME:
        return _BY_NAME[profiler.lower()]()
    raise MisconfigurationError(f"Trainer(profiler={describe(profiler)}): accepted None, a Profiler, or one of "
                                f"{sorted(_BY_NAME)}.")
