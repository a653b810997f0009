"""What a spawned (or forkserver) rank receives: the function it runs and its arguments, pickled, refusing what
the rank could not import back (code of a notebook, a REPL, ``python -c``) with an error that says what to do."""

from __future__ import annotations

import io
import os
import pickle
import sys
import types
from collections.abc import Callable
from typing import Any

from framework.errors import MisconfigurationError
from framework.runtime.start_method import fork_hazard


def pickled_for_spawn(function: Callable[..., Any], args: tuple, method: str) -> bytes:
    """``(function, args)`` pickled for ranks started with ``method`` (spawn, forkserver); a clear error where a
    rank could not rebuild them."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file is not None and not os.path.exists(main_file):  # `python -`: nothing to re-import
        raise MisconfigurationError(
            f"Starting the ranks with {method!r} imports the main script again, and this one ({main_file}) is no "
            f"file. Put the code in a file{_fork_instead()}."
        )
    buffer = io.BytesIO()
    try:
        _RankPickler(buffer, main_importable=main_file is not None).dump((function, args))
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        raise MisconfigurationError(
            f"The ranks are started with {method!r}, which hands them what they run pickled, and this cannot be: "
            f"{error}. Define the Module, its data and callbacks at the top level of an importable file (not in a "
            f"notebook cell or inside a function){_fork_instead()}."
        ) from error
    return buffer.getvalue()


class _RankPickler(pickle.Pickler):
    """Plain pickling, which refuses what a started rank could not import back: classes and functions of a
    ``__main__`` that is no file (a notebook, a REPL, ``python -c``). The rank would fail to rebuild them."""

    def __init__(self, file: io.BytesIO, main_importable: bool) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.main_importable = main_importable

    def reducer_override(self, obj: Any) -> Any:
        if (not self.main_importable and isinstance(obj, (type, types.FunctionType))
                and obj.__module__ == "__main__"):
            raise pickle.PicklingError(f"{obj.__qualname__} is defined in a notebook, a REPL or `python -c`, which "
                                       "a started process cannot import")
        return NotImplemented


def _fork_instead() -> str:
    """The advice to fork instead, with the hazard that stopped ``start_method="auto"`` from forking, if any."""
    hazard = fork_hazard()
    if hazard is None:
        return ", or use strategy='ddp_fork'"
    return f", or fork anyway with strategy='ddp_fork' (not chosen by default because {hazard})"
