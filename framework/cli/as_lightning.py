"""``framework as-lightning COMMAND``: run a command with Lightning's names pointing at framework.

Example::

    framework as-lightning python train.py       # or just: framework as-lightning train.py
    framework as-lightning pytest tests/
    framework as-lightning torchrun --nproc-per-node 2 train.py
"""

from __future__ import annotations

import os
import shutil
import sys

_USAGE = """usage: framework as-lightning COMMAND [ARGS ...]

Runs COMMAND with lightning, pytorch_lightning and lightning_fabric (and all their submodules) resolving to
framework, in COMMAND and every process it starts. A COMMAND ending in .py runs with this Python.
  framework as-lightning python train.py
  framework as-lightning pytest tests/
"""


def as_lightning_command(argv: list[str]) -> int:
    """Replace this process with ``argv`` run under the switch; returns an exit code only when it cannot."""
    from framework.as_lightning import announcement, environment_with_switch

    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE, end="", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0].endswith(".py"):
        argv = [sys.executable, *argv]
    program = shutil.which(argv[0])
    if program is None:
        print(f"framework as-lightning: no command {argv[0]!r} on PATH.\n\n{_USAGE}", end="", file=sys.stderr)
        return 2
    print(announcement(), file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execve(program, argv, environment_with_switch(os.environ))
    return 1  # not reached: execve returns only by raising
