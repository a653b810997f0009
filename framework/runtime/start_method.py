"""How the ranks of a run that no launcher started come to exist: forked, spawned, or the script run again.

The rule for ``start_method="auto"``:

- ``"fork"`` where it is safe: the platform forks cleanly (Linux), this process has not
  initialised CUDA, and the machine has no CUDA (or XPU) devices. Where devices exist, the
  first backward pass anywhere in this process (an earlier test, a quick check in a notebook)
  starts autograd's per-device threads, and a child forked after that fails at its own first
  backward; nothing tells from outside whether that has happened, so the presence of devices
  alone rules forking out. Forking is fast (no imports) and takes anything, pickled or not.
- otherwise ``"popen"`` where there is a script to run again (``python train.py``,
  ``python -m pkg``, a console script): this process becomes rank 0 and the others run the
  same command, as torchrun and Lightning's ``ddp`` do; every line before ``fit`` runs again
  in each of them, and every line after it runs on every rank.
- otherwise ``"forkserver"`` (pytest, a notebook, a REPL, ``python -c``): ranks forked from a
  clean server process that has imported torch but never run anything, so they start in a
  fraction of a second after the first; like ``"spawn"``, what they run reaches them pickled,
  so it must be defined in an importable file. ``"spawn"`` where the platform has no forkserver.

A method asked for by name (``"fork"``, ``"spawn"``, ``"forkserver"``, ``"popen"``) is taken
as it is; a fork where it is unsafe warns once, naming the hazard.
"""

from __future__ import annotations

import multiprocessing
import sys
import warnings

from framework.errors import MisconfigurationError
from framework.strategies.parallel import START_METHODS


def fork_hazard() -> str | None:
    """Why a process forked from this one now may fail, or None where forking is safe.

    Example::

        fork_hazard()   # None on a laptop CPU
        fork_hazard()   # "this machine has 8 CUDA devices: once anything in this process ran ..." on a GPU machine
    """
    platform = _platform_hazard()
    if platform is not None:
        return platform
    import torch

    if torch.cuda.is_initialized():
        return "CUDA is initialised in this process, and a forked child cannot use it"
    devices = _accelerator_devices()
    if devices:
        return (f"this machine has {devices}: once anything in this process ran a backward pass, autograd's "
                "per-device threads make a forked child fail at its first backward")
    return None


def _platform_hazard() -> str | None:
    if "fork" not in multiprocessing.get_all_start_methods():
        return f"{sys.platform} cannot fork"
    if sys.platform == "darwin":
        return "macOS system libraries are not safe to use in a forked child"
    return None


def _accelerator_devices() -> str | None:
    """``"2 CUDA devices"`` (or XPU ...), without initialising any of them; None where there are none."""
    import torch

    count = torch.cuda.device_count()  # NVML-based where it can be: leaves this process safe to fork
    if count:
        return f"{count} CUDA device{'s' if count > 1 else ''}"
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return f"{xpu.device_count()} XPU devices"
    return None


def choose_start_method(requested: str, script_available: bool) -> str:
    """``"fork"``, ``"popen"``, ``"forkserver"`` or ``"spawn"`` for ``start_method=requested`` (this module's rule).

    ``script_available``: whether this process runs a script that the other ranks can run again.
    """
    if requested not in START_METHODS:
        raise MisconfigurationError(
            f"start_method={requested!r} is not supported. Accepted: {', '.join(map(repr, START_METHODS))}."
        )
    available = multiprocessing.get_all_start_methods()
    if requested == "auto":
        if fork_hazard() is None:
            return "fork"
        if script_available:
            return "popen"
        return "forkserver" if "forkserver" in available else "spawn"
    if requested == "popen" and not script_available:
        raise MisconfigurationError(
            "start_method='popen' runs the script again for the other ranks, and there is none to run here (a "
            "notebook, a REPL, `python -c` or a test runner). Use start_method='auto'."
        )
    if requested == "fork":
        _check_fork_possible()
    elif requested != "popen" and requested not in available:
        raise MisconfigurationError(f"start_method={requested!r} is not available on {sys.platform}; use 'spawn'.")
    return requested


def _check_fork_possible() -> None:
    if _platform_hazard() is not None:
        raise MisconfigurationError(f"start_method='fork' is not available on {sys.platform}; use 'spawn'.")
    import torch

    if torch.cuda.is_initialized():
        raise MisconfigurationError(
            "CUDA was already initialised in this process, and a forked child cannot use it. Use "
            "strategy='ddp' (which does not fork here) or 'ddp_spawn', or create no CUDA tensors before the "
            "Trainer starts its processes."
        )


def warn_if_fork_is_unsafe() -> None:
    """Before forking as asked by name: a warning naming the hazard, where there is one.

    Python shows a warning once per place it is raised from, so once per process here.
    """
    hazard = fork_hazard()
    if hazard is not None:
        warnings.warn(
            f"Forking the ranks as asked (start_method='fork' / strategy='ddp_fork'), although {hazard}. A rank "
            "that then crashes or hangs is why; the default start_method='auto' starts them safely here.",
            UserWarning, stacklevel=2,
        )
