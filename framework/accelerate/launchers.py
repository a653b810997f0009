"""Starting the processes of a training function from a notebook or a test, as Accelerate's launchers do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from framework.accelerate.config_keys import KEYS
from framework.accelerate.utils.environment import patch_environment
from framework.errors import MisconfigurationError
from framework.runtime.start_method import choose_start_method
from framework.runtime.worker_processes import start_processes


def notebook_launcher(function: Callable[..., Any], args: tuple = (), num_processes: int | None = None,
                      mixed_precision: str = "no", use_port: str = "29500", master_addr: str = "127.0.0.1",
                      node_rank: int = 0, num_nodes: int = 1, rdzv_backend: str = "static", rdzv_endpoint: str = "",
                      rdzv_conf: dict | None = None, rdzv_id: str = "none", max_restarts: int = 0,
                      monitor_interval: float = 0.1, log_line_prefix_template: str | None = None) -> None:
    """Run ``function(*args)`` on ``num_processes`` processes of this machine (one per GPU when not given, else
    one), each an ``Accelerator`` made inside it joins, in ``mixed_precision``. With one process it runs here.

    The processes are forked where that is safe (no CUDA started), so a function defined in the notebook works;
    a free port is chosen (``use_port`` is accepted for Accelerate's sake). Several machines are refused: use
    ``framework launch``.

    Example::

        notebook_launcher(training_function, (config,), num_processes=2)

    :raises MisconfigurationError: where ``num_nodes`` is not 1.
    """
    if num_nodes != 1:
        raise MisconfigurationError(f"notebook_launcher(num_nodes={num_nodes}): one machine only; start several "
                                    "machines with `framework launch --num_machines N`.")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    processes = num_processes if num_processes is not None else max(gpus, 1)
    environment = {KEYS["mixed_precision"].variable: str(mixed_precision), KEYS["use_cpu"].variable: str(gpus == 0)}
    _run(function, args, processes, environment)


def debug_launcher(function: Callable[..., Any], args: tuple = (), num_processes: int = 2) -> None:
    """Run ``function(*args)`` on ``num_processes`` CPU processes joined as one run, to test distributed code on
    a machine without GPUs.

    Example::

        debug_launcher(training_function)
    """
    _run(function, args, num_processes, {KEYS["use_cpu"].variable: "True", KEYS["mixed_precision"].variable: "no"})


def _run(function: Callable[..., Any], args: tuple, processes: int, environment: dict[str, str]) -> None:
    if not isinstance(processes, int) or processes < 1:
        raise MisconfigurationError(f"num_processes={processes!r}: accepted a positive int.")
    if processes == 1:
        with patch_environment(**environment):
            function(*args)
        return
    start_processes(function, tuple(args), processes, choose_start_method("auto", script_available=False),
                    environment)
