"""The ``framework`` command line."""

from __future__ import annotations

import sys
from collections.abc import Sequence

_USAGE = """usage: framework <command> [options]

commands:
  fit          train a Module from YAML configs and flags (LightningCLI's layout), e.g.
               framework fit --config config.yaml --trainer.max_epochs=3 --model.init_args.lr=0.01
  validate, test, predict
               the same for Trainer.validate/test/predict (--ckpt_path best|last|FILE)
  launch       start a script's ranks, with torchrun's options or Accelerate's (and its config files), e.g.
               framework launch --nproc-per-node 2 train.py --epochs 3
               framework launch --num_processes 2 --mixed_precision bf16 train.py
               framework launch --config_file accelerate.yaml train.py
  config       write an Accelerate launch config (asks, or takes options), e.g.
               framework config --distributed_type MULTI_CPU --num_processes 2
  consolidate  write a sharded or DeepSpeed checkpoint directory as one file, e.g.
               framework consolidate checkpoints/last.ckpt last-full.ckpt
  as-lightning COMMAND
               run COMMAND with Lightning's names (lightning, pytorch_lightning, lightning_fabric) pointing
               at framework, in it and every process it starts, e.g.
               framework as-lightning python train.py
               framework as-lightning pytest tests/
  env          print the versions, devices and distributed backends a bug report needs
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``framework`` command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE, end="")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command in ("fit", "validate", "test", "predict"):  # trainer_commands.SUBCOMMANDS, without importing torch
        return _trainer_command(argv)
    if command == "launch":
        from framework.cli.launch import launch

        return launch(rest)
    if command == "config":
        from framework.cli.config_command import config_command

        return config_command(rest)
    if command == "as-lightning":
        from framework.cli.as_lightning import as_lightning_command

        return as_lightning_command(rest)
    if command == "env":
        from framework.cli.env import env_command

        return env_command(rest)
    if command == "consolidate":
        from framework.cli.consolidate import consolidate_command

        return consolidate_command(rest)
    print(f"framework: unknown command {command!r}.\n\n{_USAGE}", end="", file=sys.stderr)
    return 2


def _trainer_command(argv: list[str]) -> int:
    import os

    from framework.cli.trainer_commands import run
    from framework.errors import CheckpointError, MisconfigurationError

    # As under ``python -m``: class_path names modules in the working directory too.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        run(args=argv)
    except (MisconfigurationError, CheckpointError) as error:  # messages written to be read, not tracebacks
        print(f"framework {argv[0]}: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
