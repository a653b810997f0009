"""The torchrun options of ``framework launch``, checked before anything starts, by torchrun's rules.

torchrun itself checks some of them only once its agent runs (``--max-restarts -1`` fails there with a bare
``AssertionError``, which our launcher's restart loop never reached: it exited 1 without a word) and lets others
through that cannot work (``--nproc-per-node 0``, a ``--node-rank`` beyond ``--nnodes``). Here each is checked
first, and a bad one is named with what is accepted.

Example::

    check_options(parsed)    # raises ConfigError("--max-restarts -1: ...")
"""

from __future__ import annotations

import argparse

from framework.cli.errors import ConfigError

_DEVICE_COUNTS = ("auto", "cpu", "gpu", "xpu")


def check_options(parsed: argparse.Namespace) -> None:
    """Raise ``ConfigError`` naming the first of ``parsed``'s torchrun options that torchrun would refuse or that
    cannot start a job."""
    _, max_nodes = _nodes(parsed.nnodes)
    if parsed.max_restarts < 0:
        raise ConfigError(f"--max-restarts {parsed.max_restarts}: accepted is 0 (no restarts, the default) or more, "
                          "the number of times every rank is started again after one is lost.")
    _check_processes(parsed.nproc_per_node)
    static = parsed.rdzv_backend == "static" and not parsed.standalone  # elsewhere torchrun ignores it
    if static and not 0 <= parsed.node_rank < max_nodes:
        raise ConfigError(f"--node-rank {parsed.node_rank}: accepted is 0 to {max_nodes - 1} with --nnodes "
                          f"{parsed.nnodes} (this node's place among them).")
    if parsed.monitor_interval <= 0:
        raise ConfigError(f"--monitor-interval {parsed.monitor_interval}: accepted is a number of seconds above 0 "
                          "(how often the ranks are looked at).")
    if (getattr(parsed, "shutdown_timeout", None) or 0) < 0:
        raise ConfigError(f"--shutdown-timeout {parsed.shutdown_timeout}: accepted is 0 seconds or more.")
    port = getattr(parsed, "master_port", None)
    if port is not None and not 0 <= port <= 65535:
        raise ConfigError(f"--master-port {port}: accepted is a port number from 0 to 65535.")
    if parsed.local_ranks_filter:
        _check_ranks_filter(parsed.local_ranks_filter)


def _nodes(nnodes: str) -> tuple[int, int]:
    parts = nnodes.split(":")
    try:
        numbers = [int(part) for part in parts]
    except ValueError:
        numbers = []
    if len(parts) not in (1, 2) or len(numbers) != len(parts) or not 0 < numbers[0] <= numbers[-1]:
        raise ConfigError(f"--nnodes {nnodes}: accepted is a number of nodes of 1 or more (2), or MIN:MAX with "
                          "0 < MIN <= MAX (1:4).")
    return numbers[0], numbers[-1]


def _check_processes(nproc_per_node: str) -> None:
    try:
        count = int(nproc_per_node)
    except ValueError:
        if nproc_per_node not in _DEVICE_COUNTS:
            raise ConfigError(f"--nproc-per-node {nproc_per_node}: accepted is a number of processes of 1 or more, "
                              f"or {', '.join(_DEVICE_COUNTS)} (one per device of that kind).") from None
        if nproc_per_node == "gpu":
            import torch

            if not torch.cuda.is_available():
                raise ConfigError("--nproc-per-node gpu: this machine has no CUDA device; give a number of "
                                  "processes, or cpu (one per core).") from None
        return
    if count < 1:
        raise ConfigError(f"--nproc-per-node {nproc_per_node}: accepted is a number of processes of 1 or more, or "
                          f"{', '.join(_DEVICE_COUNTS)}.")


def _check_ranks_filter(ranks: str) -> None:
    try:
        [int(rank) for rank in ranks.split(",")]
    except ValueError:
        raise ConfigError(f"--local-ranks-filter {ranks}: accepted is a comma-separated list of local ranks "
                          "(0,1).") from None
