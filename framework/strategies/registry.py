"""Turns what users type for ``strategy=`` into a Strategy object."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from framework.errors import MisconfigurationError, describe
from framework.strategies.base import Strategy
from framework.strategies.ddp import DDPStrategy
from framework.strategies.fsdp import FSDPStrategy
from framework.strategies.model_parallel import ModelParallelStrategy
from framework.strategies.single import SingleDeviceStrategy
from framework.strategies.zero1 import ShardedStrategy

_BUILDERS: dict[str, Callable[[], Strategy]] = {
    "single": SingleDeviceStrategy,
    "ddp": DDPStrategy,
    "ddp_spawn": lambda: DDPStrategy(start_method="spawn"),
    "ddp_fork": lambda: DDPStrategy(start_method="fork"),
    "sharded": ShardedStrategy,
    "zero2": lambda: FSDPStrategy(sharding_strategy="SHARD_GRAD_OP"),
    "zero2_offload": lambda: FSDPStrategy(sharding_strategy="SHARD_GRAD_OP", cpu_offload=True),
    "zero3": lambda: FSDPStrategy(sharding_strategy="FULL_SHARD"),
    "zero3_offload": lambda: FSDPStrategy(sharding_strategy="FULL_SHARD", cpu_offload=True),
    "model_parallel": ModelParallelStrategy,
}
# "auto" is decided by the Runtime, which knows how many devices there are.
_ALIASES: dict[str, str] = {
    "single_device": "single",
    "ddp_notebook": "ddp_fork",
    "zero1": "sharded",
    "ddp_sharded": "sharded",
    "fsdp_shard_grad_op": "zero2",
    "fsdp_shard_grad_op_offload": "zero2_offload",
    "fsdp": "zero3",
    "fsdp_offload": "zero3_offload",
    "fsdp_cpu_offload": "zero3_offload",
}


# Lightning's DeepSpeed names: DeepSpeed's arguments, and what runs instead where DeepSpeed is not installed.
DEEPSPEED_NAMES: dict[str, tuple[dict[str, Any], str]] = {
    "deepspeed": ({}, "zero2"),
    "deepspeed_stage_1": ({"stage": 1}, "sharded"),
    "deepspeed_stage_2": ({"stage": 2}, "zero2"),
    "deepspeed_stage_2_offload": ({"stage": 2, "offload_optimizer": True}, "zero2_offload"),
    "deepspeed_stage_3": ({"stage": 3}, "zero3"),
    "deepspeed_stage_3_offload": ({"stage": 3, "offload_optimizer": True, "offload_parameters": True},
                                  "zero3_offload"),
    "deepspeed_stage_3_offload_nvme": ({"stage": 3, "offload_optimizer": True, "offload_parameters": True,
                                        "remote_device": "nvme", "offload_params_device": "nvme",
                                        "offload_optimizer_device": "nvme"}, "zero3_offload"),
}
_told_instead: set[str] = set()


def _deepspeed_or_instead(name: str) -> Strategy:
    from framework.strategies.deepspeed import EXTRA_HINT, DeepSpeedStrategy, deepspeed_available

    arguments, instead = DEEPSPEED_NAMES[name]
    if deepspeed_available():
        return DeepSpeedStrategy(**arguments)
    if name not in _told_instead and os.environ.get("RANK", "0") == "0":
        _told_instead.add(name)
        from framework import console

        console.warn_user(
            f"strategy={name!r}: DeepSpeed is not installed, so framework's {instead!r} (ZeRO on PyTorch's FSDP2"
            f"{', offloading to the CPU, not NVMe' if name.endswith('nvme') else ''}) runs instead. For DeepSpeed "
            f"itself: {EXTRA_HINT}.")
    return _BUILDERS[instead]()


def register_strategy(name: str, builder: Callable[[], Strategy], aliases: tuple[str, ...] = ()) -> None:
    """Make ``strategy=name`` (and each alias) build ``builder()``."""
    _BUILDERS[name] = builder
    for alias in aliases:
        _ALIASES[alias] = name


def resolve_strategy(strategy: object) -> Strategy:
    """A Strategy instance for ``strategy`` (an instance, or a registered name).

    :raises MisconfigurationError: where ``strategy`` is neither a ``Strategy`` nor a registered name.
    """
    if isinstance(strategy, Strategy):
        return strategy
    if isinstance(strategy, str) and strategy.lower() == "auto":
        return SingleDeviceStrategy()
    if isinstance(strategy, str):
        name = _ALIASES.get(strategy.lower(), strategy.lower())
        if name in DEEPSPEED_NAMES and name not in _BUILDERS:
            return _deepspeed_or_instead(name)
        if name in _BUILDERS:
            return _BUILDERS[name]()
    accepted = ", ".join(repr(n) for n in sorted({"auto", *_BUILDERS, *_ALIASES, *DEEPSPEED_NAMES}))
    raise MisconfigurationError(
        f"strategy={describe(strategy)} is not a known strategy. Accepted: {accepted}, or a Strategy instance."
    )
