"""Which ``Accelerator`` (and Runtime) this process's free functions and state objects work with.

Accelerate keeps process-wide state; here the newest Accelerator a script made owns it, and
this module only points at it (weakly: it goes when the Accelerator goes). Before any
Accelerator exists, a Runtime of this module's own joins the ranks a launcher started, as
Accelerate's ``PartialState()`` does.
"""

from __future__ import annotations

import os

from framework.accelerate.config_keys import KEYS
from framework.accelerate.newest_accelerator import current_accelerator, register_accelerator
from framework.accelerate.utils.environment import parse_flag_from_env
from framework.runtime import Runtime

__all__ = ["current_accelerator", "current_runtime", "register_accelerator"]

# Kept with the id of the process that made it: a rank forked from a process that had called PartialState() (a
# notebook, a test) must join its own launch's ranks, not reuse the parent's one-process Runtime.
_own_runtime: tuple[int, Runtime] | None = None


def current_runtime(cpu: bool = False) -> Runtime:
    """The newest Accelerator's Runtime; without one, a Runtime of this module's that joined the launched ranks."""
    global _own_runtime
    accelerator = current_accelerator()
    if accelerator is not None:
        return accelerator._runtime
    if _own_runtime is None or _own_runtime[0] != os.getpid():
        runtime = Runtime(accelerator="cpu" if cpu or parse_flag_from_env(KEYS["use_cpu"].variable) else "auto")
        runtime.setup_environment()
        _own_runtime = (os.getpid(), runtime)
    return _own_runtime[1]
