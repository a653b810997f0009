"""A script for ``framework launch`` to start in the restart tests: the ranks join a gloo group and all-reduce, then
do what ``PROBE_MODE`` says:

- ``kill`` (the default): on each attempt before ``PROBE_KILLS``, rank 1 kills itself with SIGKILL (a lost rank),
  so the launcher must start both ranks again, each time through a new rendezvous;
- ``signal``: each rank waits for SIGUSR1, SIGUSR2 or SIGTERM, writes which one came, and exits with 75 as a
  preempted rank does.

    framework launch --nproc-per-node 2 --max-restarts N tests/cli/restart_probe.py OUT

Each rank appends ``attempt rank sum`` to OUT after its all-reduce, then torchrun's restart variables as it sees
them (``TORCHELASTIC_RESTART_COUNT TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID``), and ``signalled rank NAME``
in ``signal``.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch
import torch.distributed as dist


def main(out: str) -> None:
    attempt = int(os.environ.get("FRAMEWORK_RESTART_COUNT", "0"))
    mode = os.environ.get("PROBE_MODE", "kill")
    received = []
    for name in ("SIGUSR1", "SIGUSR2", "SIGTERM"):
        signal.signal(getattr(signal, name), lambda number, frame: received.append(signal.Signals(number).name))
    dist.init_process_group("gloo")
    total = torch.ones(1)
    dist.all_reduce(total)
    with open(out, "a") as lines:
        names = ("RESTART_COUNT", "MAX_RESTARTS", "RUN_ID")
        torchruns = (os.environ.get(f"TORCHELASTIC_{name}", "-") for name in names)
        lines.write(f"{attempt} {dist.get_rank()} {int(total.item())} {' '.join(torchruns)}\n")
    dist.barrier()
    if mode == "signal":
        print("waiting", flush=True)
        while not received:
            time.sleep(0.05)
        with open(out, "a") as lines:
            lines.write(f"signalled {dist.get_rank()} {received[0]}\n")
        sys.exit(75)
    if mode == "kill" and attempt < int(os.environ.get("PROBE_KILLS", "0")) and dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()  # rank 0 waits here for the rank that was killed
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
