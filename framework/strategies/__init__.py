"""Strategies: single device, and (in later modules) DDP, ZeRO-1 and FSDP2-based ZeRO-2/3."""

from framework.strategies.base import Ranks, Strategy
from framework.strategies.ddp import DDPStrategy
from framework.strategies.registry import register_strategy, resolve_strategy
from framework.strategies.single import SingleDeviceStrategy

__all__ = ["DDPStrategy", "Ranks", "SingleDeviceStrategy", "Strategy", "register_strategy", "resolve_strategy"]
