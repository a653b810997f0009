"""Where a searched value lives: an attribute of the Module or DataModule, or one of their hyperparameters."""

from __future__ import annotations

from typing import Any


def holder_of(name: str, *owners: Any) -> Any:
    """The first of ``owners`` (None skipped) having ``name`` as an attribute or a hyperparameter, or None."""
    for owner in owners:
        if owner is not None and (name in getattr(owner, "hparams", {}) or hasattr(owner, name)):
            return owner
    return None


def write_value(owner: Any, name: str, value: Any) -> None:
    """Set ``name`` on ``owner``: the hyperparameter when it has one, and the attribute when it has one."""
    if name in getattr(owner, "hparams", {}):
        owner.hparams[name] = value
    if hasattr(owner, name) or name not in getattr(owner, "hparams", {}):
        setattr(owner, name, value)
