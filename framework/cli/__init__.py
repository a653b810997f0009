"""The ``framework`` command (fit/validate/test/predict from YAML configs, launch, config, consolidate, env) and
:func:`run`, the same fit/validate/test/predict for a script of one's own."""

from __future__ import annotations

from typing import Any

__all__ = ["CommandRun", "ConfigError", "run"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: ``framework launch`` and ``framework env`` should not import the Trainer.
    if name in ("run", "CommandRun", "ConfigError"):
        from framework.cli import trainer_commands

        return getattr(trainer_commands, name)
    raise AttributeError(f"module 'framework.cli' has no attribute {name!r}")
