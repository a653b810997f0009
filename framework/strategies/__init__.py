"""Strategies: single device, DDP, ZeRO-1 (sharded optimizer state), FSDP2-based ZeRO-2/3 and HSDP, tensor
parallel x FSDP2 (ModelParallelStrategy), and DeepSpeed's engine (the ``deepspeed`` extra)."""

from framework.strategies.base import Ranks, Strategy
from framework.strategies.ddp import DDPStrategy
from framework.strategies.deepspeed import DeepSpeedStrategy
from framework.strategies.fsdp import FSDPStrategy
from framework.strategies.model_parallel import ModelParallelStrategy
from framework.strategies.parallel import ParallelStrategy
from framework.strategies.registry import register_strategy, resolve_strategy
from framework.strategies.single import SingleDeviceStrategy
from framework.strategies.zero1 import ShardedStrategy

__all__ = [
    "DDPStrategy",
    "DeepSpeedStrategy",
    "FSDPStrategy",
    "ModelParallelStrategy",
    "ParallelStrategy",
    "Ranks",
    "ShardedStrategy",
    "SingleDeviceStrategy",
    "Strategy",
    "register_strategy",
    "resolve_strategy",
]
