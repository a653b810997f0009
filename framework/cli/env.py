"""``framework env``: what a bug report needs to say about the machine and the installed versions."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from collections.abc import Sequence

# The packages whose versions change how a run behaves; "lightning" when it is there, for comparisons.
_PACKAGES = ("torch", "torchmetrics", "fsspec", "PyYAML", "tensorboard", "tqdm", "numpy", "lightning")


def env_command(argv: Sequence[str]) -> int:
    """Print the report; the exit code (2 for arguments it does not take)."""
    if list(argv) not in ([], ["-h"], ["--help"]):
        print(f"framework env takes no arguments, got {' '.join(argv)!r}.", file=sys.stderr)
        return 2
    if argv:
        print("usage: framework env\n\nPrint the versions, devices and distributed backends a bug report needs.")
        return 0
    print(report())
    return 0


def report() -> str:
    """The versions of Python, the framework and its dependencies, the devices torch finds, and the distributed
    backends it has, one ``name: value`` line each.

    Example::

        $ framework env
        framework: 0.1.0
        python: 3.11.7 (Linux-6.1-x86_64)
        torch: 2.13.0+cpu
        ...
    """
    from framework.version import __version__

    lines = [("framework", __version__), ("python", f"{platform.python_version()} ({platform.platform()})")]
    lines += [(name, _version_of(name)) for name in _PACKAGES]
    lines += _devices() + _backends()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lines.append(("cpu cores", str(cores)))
    lines.append(("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "not set")))
    width = max(len(name) for name, _ in lines)
    return "\n".join(f"{name + ':':<{width + 1}} {value}" for name, value in lines)


def _version_of(package: str) -> str:
    if package == "torch":  # torch's own string names the build ("2.14.1+cu130"); the wheel's metadata may not
        import torch

        return torch.__version__
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _devices() -> list[tuple[str, str]]:
    import torch

    if torch.cuda.is_available():
        try:
            names = ", ".join(torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count()))
        except (RuntimeError, AssertionError) as error:  # a driver that fails to start is worth reporting as such
            names = f"they fail to start: {error}"
        cuda = f"{torch.cuda.device_count()} ({names}); CUDA {torch.version.cuda}"
    else:
        cuda = f"none (torch built with CUDA {torch.version.cuda})" if torch.version.cuda else "none (CPU build)"
    mps = getattr(torch.backends, "mps", None)
    return [("cuda devices", cuda), ("mps", "available" if mps is not None and mps.is_available() else "not available")]


def _backends() -> list[tuple[str, str]]:
    import torch.distributed as dist

    if not dist.is_available():
        return [("distributed", "not available in this torch build")]
    found = [name for name, check in (("gloo", dist.is_gloo_available), ("nccl", dist.is_nccl_available),
                                      ("mpi", dist.is_mpi_available)) if check()]
    return [("distributed backends", ", ".join(found) or "none")]
