"""Which ``Accelerator`` (and Runtime) this process's free functions and state objects work with.

Accelerate keeps process-wide state; here the newest Accelerator a script made owns it, and
this module only points at it (weakly: it goes when the Accelerator goes). Before any
Accelerator exists, a Runtime of this module's own joins the ranks a launcher started, as
Accelerate's ``PartialState()`` does.
"""

from __future__ import annotations

from framework.accelerate.config_keys import KEYS
from framework.accelerate.newest_accelerator import current_accelerator, register_accelerator
from framework.accelerate.utils.environment import parse_flag_from_env
from framework.runtime import Runtime

__all__ = ["current_accelerator", "current_runtime", "register_accelerator"]

_own_runtime: Runtime | None = None


def current_runtime(cpu: bool = False) -> Runtime:
    """The newest Accelerator's Runtime; without one, a Runtime of this module's that joined the launched ranks."""
    global _own_runtime
    accelerator = current_accelerator()
    if accelerator is not None:
        return accelerator._runtime
    if _own_runtime is None:
        _own_runtime = Runtime(accelerator="cpu" if cpu or parse_flag_from_env(KEYS["use_cpu"].variable) else "auto")
        _own_runtime.setup_environment()
    return _own_runtime
