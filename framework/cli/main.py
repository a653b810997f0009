"""The ``framework`` command line."""

from __future__ import annotations

import sys
from collections.abc import Sequence

_USAGE = """usage: framework <command> [options]

commands:
  launch       start a script's ranks (torchrun's options), e.g.
               framework launch --nproc-per-node 2 train.py --epochs 3
  consolidate  write a sharded checkpoint directory as one file, e.g.
               framework consolidate checkpoints/last.ckpt last-full.ckpt
  env          print the versions, devices and distributed backends a bug report needs
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``framework`` command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE, end="")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "launch":
        from framework.cli.launch import launch

        return launch(rest)
    if command == "env":
        from framework.cli.env import env_command

        return env_command(rest)
    if command == "consolidate":
        from framework.cli.consolidate import consolidate_command

        return consolidate_command(rest)
    print(f"framework: unknown command {command!r}.\n\n{_USAGE}", end="", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
