"""``framework launch``: start a script's ranks with ``torch.distributed.run`` (torchrun), on one node or many.

Every option torchrun takes is accepted, spelled with dashes or underscores. Two defaults
differ: on one node without a rendezvous address it runs ``--standalone`` (a free port, so
two runs on one machine do not collide), and each rank gets ``OMP_NUM_THREADS`` = its share
of the CPU cores instead of torchrun's 1.

On several nodes (``--nnodes 2 --node-rank K --master-addr HOST``, run on each), a rank that fails on one node
ends the launch on every node, as torchrun does on one: the other nodes' launchers stop their ranks, and each
launcher prints which rank failed first and with what error (:mod:`framework.runtime.peer_failure`).

``--max-restarts N`` starts every rank again when one is killed (up to N times; the Trainer resumes from the
newest complete checkpoint), but not after an exception in the script (:mod:`framework.cli.launch_restarts`).
SIGTERM, SIGUSR1 and SIGUSR2 sent to the launcher are passed on to the ranks, which save a checkpoint and stop;
the launcher waits ``--shutdown-timeout`` seconds (torchrun's option, 30 by default) before it kills them, and
exits with status 75 (``REQUEUE_EXIT_CODE``), as each rank does: "start the job again". Once a rank has failed,
the others get up to five seconds to end by themselves before the launcher stops them, so that a rank which lost
the failed one in a collective says which rank left and how.

``accelerate launch``'s options and config files are the other form (:mod:`framework.cli.accelerate_launch`):
they become torchrun options and the environment variables Accelerate's launcher sets.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from framework.runtime.peer_failure import NodeWatch

#: How long the other ranks get to end by themselves once one failed, before the launcher stops them.
_OWN_END_S = 5.0
_RENDEZVOUS_OPTIONS = ("--rdzv-endpoint", "--rdzv_endpoint", "--master-addr", "--master_addr", "--master-port",
                       "--master_port", "--standalone")


def launch(argv: Sequence[str]) -> int:
    """Run ``torchrun <argv>``, or the torchrun launch Accelerate's options in ``argv`` describe; returns the exit
    code (0 when every rank succeeded, 2 for options or a config that cannot be honoured).

    Example::

        framework launch --nproc-per-node 2 train.py --epochs 3
        framework launch --num_processes 2 --mixed_precision bf16 train.py --epochs 3
    """
    from framework.cli.accelerate_launch import help_text, print_notes, translate, wants_help
    from framework.cli.errors import ConfigError

    argv = list(argv)
    if wants_help(argv):
        print(help_text(), end="")
        return 0
    try:
        accelerate = translate(argv)
    except ConfigError as error:  # a message written to be read, not a traceback
        print(f"framework launch: error: {error}", file=sys.stderr)
        return 2
    if accelerate is not None:
        print_notes(accelerate.notes, sys.stderr)
        os.environ.update(accelerate.environment)
        argv = accelerate.torchrun_argv
    return _torchrun(argv)


def _torchrun(argv: list[str]) -> int:
    """``torchrun <argv>`` with this launcher's defaults (--standalone on one node, OMP_NUM_THREADS, the restarts
    of :mod:`framework.cli.launch_restarts`, preemption signals passed on to the ranks)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import get_args_parser, parse_min_max_nnodes

    from framework.cli.errors import ConfigError
    from framework.cli.launch_options import check_options
    from framework.cli.launch_restarts import forward_preemption_signals, run_with_restarts, say_failure
    from framework.runtime.preemption_signals import JOB_ID_VARIABLE, REQUEUE_EXIT_CODE

    parser = get_args_parser()
    options = _options_before_script(argv, _flags_of(parser))
    if not any(option.split("=")[0] in _RENDEZVOUS_OPTIONS for option in options) and _nodes(options) == "1":
        argv.insert(0, "--standalone")
    parsed = parser.parse_args(argv)
    try:
        check_options(parsed)
    except ConfigError as error:
        print(f"framework launch: error: {error}", file=sys.stderr)
        return 2
    os.environ.setdefault(JOB_ID_VARIABLE, uuid.uuid4().hex)  # the job every attempt's checkpoints belong to
    if "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(_threads_per_rank(parsed.nproc_per_node))
    forward_preemption_signals(parsed)
    try:
        if parsed.max_restarts and parse_min_max_nnodes(parsed.nnodes)[1] == 1:
            return run_with_restarts(parsed, _run_attempt)
        if parsed.max_restarts:
            os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # a new store for each restart
        failures = _run_attempt(parsed)
    except SignalException as received:
        return _signalled(received.sigval)
    if not failures:
        return 0
    if REQUEUE_EXIT_CODE in failures.values():
        return REQUEUE_EXIT_CODE
    say_failure(failures)
    return 1


def _run_attempt(parsed: argparse.Namespace) -> dict[int, int]:
    """Run torchrun's agent for this node (and, on several nodes, the watch that ends them all when one fails);
    the failed ranks' exit codes, the first to fail first (empty when every rank succeeded)."""
    from torch.distributed.run import run

    watch = _node_watch(parsed)
    try:
        with _others_end_first(_OWN_END_S):
            run(parsed)
    except Exception as error:  # each failed rank has printed its error already
        if type(error).__name__ == "ChildFailedError":
            failures = _exit_codes(error.failures)
            if watch is not None:
                watch.report_failure(failures)
            return failures
        raise
    finally:
        if watch is not None:
            watch.finish()
    return {}


@contextlib.contextmanager
def _others_end_first(grace_s: float) -> Iterator[None]:
    """Inside it, once a rank has failed, torchrun's agent lets the others end by themselves for up to ``grace_s``
    seconds before it stops them (SIGTERM). A rank whose collective lost the failed one ends within a second, and
    so prints why (which rank left, and how) instead of dying of the signal before it could; a rank that is not
    waiting for it is stopped ``grace_s`` later. Without a failure (a signal passed on to the ranks, the end of a
    run) the agent stops them at once, as before."""
    from torch.distributed.elastic.multiprocessing.api import SubprocessContext

    close = SubprocessContext._close

    def close_after_grace(context: Any, death_sig: signal.Signals, timeout: int = 30) -> None:
        processes = [handler.proc for handler in context.subprocess_handlers.values()]
        if any(process.poll() not in (None, 0) for process in processes):
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and any(process.poll() is None for process in processes):
                time.sleep(0.05)
        close(context, death_sig, timeout)

    SubprocessContext._close = close_after_grace
    try:
        yield
    finally:
        SubprocessContext._close = close


def _signalled(number: signal.Signals) -> int:
    """The launcher's exit code after it received ``number`` and passed it on to the ranks."""
    from framework.runtime.preemption_signals import PREEMPTION_SIGNALS, REQUEUE_EXIT_CODE

    if number in PREEMPTION_SIGNALS:
        print(f"framework launch: {number.name} received and passed on to the ranks, which save a checkpoint "
              f"and stop; exit status {REQUEUE_EXIT_CODE} asks for the job to be started again.", file=sys.stderr,
              flush=True)
        return REQUEUE_EXIT_CODE
    return 128 + int(number)


def _node_watch(parsed: argparse.Namespace) -> NodeWatch | None:
    """On one node of several, what stops this node's ranks when another node's fail (and tells the others when
    this node's do); None on one node, where torchrun's agent stops all ranks itself, and for rendezvous backends
    that keep no TCPStore (etcd)."""
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint
    from torch.distributed.run import get_rdzv_endpoint, parse_min_max_nnodes

    from framework.runtime.peer_failure import NodeWatch

    _, nodes = parse_min_max_nnodes(parsed.nnodes)
    if nodes < 2 or parsed.rdzv_backend not in ("static", "c10d"):
        return None
    address, port = parse_rendezvous_endpoint(get_rdzv_endpoint(parsed), default_port=29400)
    static = parsed.rdzv_backend == "static"  # node ranks given, node 0's launcher holds the store
    watch = NodeWatch(address, port, nodes, parsed.node_rank if static else None, static and parsed.node_rank == 0)
    watch.start()
    return watch


def _exit_codes(failures: dict[int, Any]) -> dict[int, int]:
    """torchrun's failed ranks (global rank -> ProcessFailure) as exit codes, the first to fail first."""
    by_time = sorted(failures.items(), key=lambda item: item[1].timestamp)
    return {rank: failure.exitcode for rank, failure in by_time}


def _flags_of(parser: argparse.ArgumentParser) -> set[str]:
    """The options of torchrun's parser that take no value (``--standalone``, ``-m`` ...), whatever its version."""
    return {option for action in parser._actions if action.nargs == 0 for option in action.option_strings}


def _options_before_script(argv: list[str], flags: set[str]) -> list[str]:
    """The launcher's own options: everything before the script (the first argument not an option or its value)."""
    options: list[str] = []
    index = 0
    while index < len(argv) and argv[index].startswith("-"):
        options.append(argv[index])
        takes_value = "=" not in argv[index] and argv[index] not in flags
        if takes_value and index + 1 < len(argv):
            options.append(argv[index + 1])
            index += 1
        index += 1
    return options


def _nodes(options: list[str]) -> str:
    for index, option in enumerate(options):
        name, _, value = option.partition("=")
        if name in ("--nnodes",):
            return value or (options[index + 1] if index + 1 < len(options) else "1")
    return "1"


def _threads_per_rank(nproc_per_node: str) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        ranks = int(nproc_per_node)
    except ValueError:  # "auto", "cpu", "gpu": torchrun decides the count
        import torch

        ranks = torch.cuda.device_count() if torch.cuda.is_available() and nproc_per_node != "cpu" else cores
    return max(1, cores // max(1, ranks))
