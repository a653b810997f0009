"""The environment a run reads: Accelerate's flags from environment variables, and blocks that change them for a
while (``patch_environment``, ``clear_environment``)."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from framework.accelerate.config_values import MIXED_PRECISIONS
from framework.errors import MisconfigurationError

_TRUE = ("1", "true", "yes", "y", "on", "t")
_FALSE = ("0", "false", "no", "n", "off", "f")


def str_to_bool(value: str, to_bool: bool = False) -> int | bool:
    """``1`` for a true word (``"yes"``, ``"true"``, ``"1"`` ...), ``0`` for a false one (booleans with
    ``to_bool``), as Accelerate reads its flags.

    :raises ValueError: where ``value`` is neither a true nor a false word.
    """
    word = value.strip().lower()
    if word in _TRUE:
        return True if to_bool else 1
    if word in _FALSE:
        return False if to_bool else 0
    raise ValueError(f"str_to_bool({value!r}): accepted {', '.join(_TRUE + _FALSE)}.")


def parse_flag_from_env(key: str, default: bool = False) -> bool:
    """The environment variable ``key`` read as a boolean (``default`` when unset)."""
    value = os.environ.get(key)
    return default if value is None else value.strip().lower() in _TRUE


def get_int_from_env(env_keys: list[str], default: int) -> int:
    """The first of ``env_keys`` that is set, as an int (``default`` when none is)."""
    for key in env_keys:
        value = int(os.environ.get(key, -1))
        if value >= 0:
            return value
    return default


@contextlib.contextmanager
def patch_environment(**kwargs: Any) -> Iterator[None]:
    """Set environment variables (names upper-cased, values as strings) for the block; the old values come back.

    Example::

        with patch_environment(master_port="29501"):
            ...
    """
    saved = {key.upper(): os.environ.get(key.upper()) for key in kwargs}
    os.environ.update({key.upper(): str(value) for key, value in kwargs.items()})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def clear_environment() -> Iterator[None]:
    """Run the block with an empty environment; the whole environment comes back after it."""
    saved = dict(os.environ)
    os.environ.clear()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def purge_accelerate_environment(func_or_cls: Any) -> Any:
    """A decorator for a function (or each test method of a class): ``ACCELERATE_*`` variables it sets are
    removed when it returns, so one test's launcher settings do not leak into the next."""
    if isinstance(func_or_cls, type):
        for name, member in list(vars(func_or_cls).items()):
            if name.startswith("test") and callable(member):
                setattr(func_or_cls, name, purge_accelerate_environment(member))
        return func_or_cls

    @functools.wraps(func_or_cls)
    def run(*args: Any, **kwargs: Any) -> Any:
        before = {key for key in os.environ if key.startswith("ACCELERATE_")}
        try:
            return func_or_cls(*args, **kwargs)
        finally:
            for key in [key for key in os.environ if key.startswith("ACCELERATE_") and key not in before]:
                del os.environ[key]

    return run


def _numa_refused(name: str) -> Callable[..., None]:
    def refuse(local_process_index: int, verbose: bool | None = None) -> None:
        raise MisconfigurationError(f"{name}() is not supported: the framework does not pin processes to NUMA "
                                    "nodes; leave enable_cpu_affinity off.")

    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = ("Refused when called: the framework does not pin processes to NUMA nodes.\n\n"
                      ":raises MisconfigurationError: always: the framework does not pin processes to NUMA nodes.")
    return refuse


set_numa_affinity = _numa_refused("set_numa_affinity")
override_numa_affinity = _numa_refused("override_numa_affinity")


def default_config_path() -> Path:
    """Where ``framework config`` writes and ``framework launch`` first looks:
    ``${XDG_CACHE_HOME:-~/.cache}/framework/accelerate/default_config.yaml``."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(os.path.expanduser(cache), "framework", "accelerate", "default_config.yaml")


def write_basic_config(mixed_precision: str = "no", save_location: str | os.PathLike | None = None) -> str | bool:
    """Write a launch config for this machine (one process per GPU, else one CPU process) where ``framework launch``
    looks first, unless a file is there already; returns the path written, or False when it left a file alone.

    Example::

        write_basic_config(mixed_precision="bf16")

    :raises MisconfigurationError: where ``mixed_precision`` is not one of "no", "fp16" and "bf16".
    """
    import torch
    import yaml

    from framework.io.fs import write_bytes_atomic

    if mixed_precision not in MIXED_PRECISIONS:
        raise MisconfigurationError(f"write_basic_config(mixed_precision={mixed_precision!r}): accepted "
                                    f"{', '.join(repr(name) for name in MIXED_PRECISIONS)}.")
    path = os.fspath(save_location if save_location is not None else default_config_path())
    if os.path.exists(path):
        return False
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    config = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_GPU" if gpus > 1 else "NO",
              "mixed_precision": mixed_precision, "num_processes": max(gpus, 1), "num_machines": 1,
              "machine_rank": 0, "use_cpu": gpus == 0, "debug": False}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_bytes_atomic(path, yaml.safe_dump(config, sort_keys=True).encode("utf-8"))
    return path
