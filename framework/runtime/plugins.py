"""What ``plugins=`` holds, sorted: at most one checkpoint IO, one precision and one cluster environment.

Example::

    given = sort_plugins([AsyncCheckpointIO(), MixedPrecision("16-mixed", "cuda")], precision=None)
    given.checkpoint_io, given.precision, given.environment
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from framework.errors import MisconfigurationError, describe
from framework.io.checkpoint_io import CheckpointIO
from framework.plugins.environments import ClusterEnvironment
from framework.precision.base import Precision

#: One of the plugins ``plugins=`` takes (the Trainer's and the Runtime's).
Plugin = CheckpointIO | Precision | ClusterEnvironment

_KINDS: tuple[tuple[str, type], ...] = (
    ("checkpoint_io", CheckpointIO), ("precision", Precision), ("environment", ClusterEnvironment),
)
_ACCEPTED = ("a CheckpointIO (TorchCheckpointIO, AsyncCheckpointIO, or yours), a precision plugin (Precision, "
             "MixedPrecision, HalfPrecision, DoublePrecision) and a ClusterEnvironment (LightningEnvironment, "
             "SLURMEnvironment, TorchElasticEnvironment, or yours), at most one of each, from framework.plugins")


@dataclass(frozen=True)
class GivenPlugins:
    """The plugins of one ``plugins=`` argument, by kind (None: not given)."""

    checkpoint_io: CheckpointIO | None = None
    precision: Precision | None = None
    environment: ClusterEnvironment | None = None


def sort_plugins(plugins: Any, precision: Any) -> GivenPlugins:
    """``plugins`` (None, one plugin, or a list) by kind; ``precision`` is the ``precision=`` argument, which a
    precision plugin may not be given with."""
    given = [] if plugins is None else list(plugins) if _is_list(plugins) else [plugins]
    found: dict[str, Any] = {}
    for plugin in given:
        kind = next((name for name, base in _KINDS if isinstance(plugin, base)), None)
        if kind is None:
            raise MisconfigurationError(f"plugins={describe(plugins)}: {describe(plugin)} is not a plugin. "
                                        f"Accepted are {_ACCEPTED}.")
        if kind in found:
            raise MisconfigurationError(f"plugins={describe(plugins)} holds two {kind} plugins, "
                                        f"{found[kind]!r} and {plugin!r}; give one.")
        found[kind] = plugin
    if "precision" in found and precision is not None:
        raise MisconfigurationError(f"precision={precision!r} and the precision plugin "
                                    f"{found['precision']!r} in plugins= were both given; choose one.")
    return GivenPlugins(**found)


def _is_list(plugins: Any) -> bool:
    return isinstance(plugins, Iterable) and not isinstance(plugins, (str, bytes, CheckpointIO, Precision,
                                                                       ClusterEnvironment))


def checked_checkpoint_io(checkpoint_io: CheckpointIO | None, strategy: Any) -> CheckpointIO | None:
    """``checkpoint_io`` for ``strategy``; a plugin of your own is refused where the strategy writes its checkpoints
    itself (sharded ones, through ``torch.distributed.checkpoint``)."""
    if checkpoint_io is None or not strategy.writes_own_checkpoints:
        return checkpoint_io
    from framework.io.async_writer import AsyncCheckpointIO
    from framework.io.checkpoint_io import TorchCheckpointIO

    inner = checkpoint_io.checkpoint_io if isinstance(checkpoint_io, AsyncCheckpointIO) else checkpoint_io
    if type(inner) is not TorchCheckpointIO:
        raise MisconfigurationError(
            f"plugins=[{checkpoint_io!r}]: {type(strategy).__name__} writes sharded checkpoints (directories every "
            "rank writes its part of) through torch.distributed.checkpoint, not through a CheckpointIO. Use "
            "FSDPStrategy(state_dict_type='full') for one file through your plugin, or leave the plugin out."
        )
    return checkpoint_io
