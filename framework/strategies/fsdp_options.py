"""What FSDPStrategy accepts for its options, checked when it is made (not later, inside every rank)."""

from __future__ import annotations

from typing import Any

from framework.checks import is_int
from framework.errors import MisconfigurationError, describe

# FSDP version 1's sharding strategies, as torch's ShardingStrategy spells and orders them (Accelerate numbers them
# from 1 in this order). FSDPStrategy takes all but NO_SHARD (that is strategy="ddp").
SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")
# What each accepted sharding_strategy spelling means for fully_shard's reshard_after_forward.
_RESHARD_AFTER_FORWARD = {"FULL_SHARD": True, "ZERO3": True, "SHARD_GRAD_OP": False, "ZERO2": False,
                          "HYBRID_SHARD": True, "_HYBRID_SHARD_ZERO2": False}
HYBRID = ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")
STATE_DICT_TYPES = ("sharded", "full")


def reshards_after_forward(sharding_strategy: str) -> bool:
    """Whether a unit's parameters are split again right after its forward (ZeRO-3) or kept until backward."""
    return _RESHARD_AFTER_FORWARD[sharding_strategy]


def check_offload(cpu_offload: Any) -> None:
    if isinstance(cpu_offload, bool) or type(cpu_offload).__name__.endswith("OffloadPolicy"):
        return
    raise MisconfigurationError(
        f"FSDPStrategy(cpu_offload={describe(cpu_offload)}): accepted True, False or a "
        "torch.distributed.fsdp.CPUOffloadPolicy."
    )


def check_fully_shard_options(options: dict[str, Any]) -> None:
    """Other keyword arguments go to ``fully_shard``: refused here, not later inside every rank, when it takes none
    of that name."""
    if not options:
        return
    import inspect

    from torch.distributed.fsdp import fully_shard

    taken = set(inspect.signature(fully_shard).parameters) - {"module", "mesh", "reshard_after_forward", "mp_policy",
                                                                "offload_policy"}
    unknown = sorted(set(options) - taken)
    if unknown:
        raise MisconfigurationError(
            f"FSDPStrategy got {', '.join(f'{name}=' for name in unknown)} which neither it nor fully_shard takes. "
            f"FSDPStrategy's own: auto_wrap_policy, activation_checkpointing_policy, sharding_strategy, cpu_offload, "
            "state_dict_type, mixed_precision, start_method, timeout, process_group_backend, device_mesh; "
            f"fully_shard's: "
            f"{', '.join(sorted(taken))}."
        )


def sharding_name(sharding_strategy: Any) -> str:
    name = getattr(sharding_strategy, "name", sharding_strategy)
    if isinstance(name, str) and name.upper() in _RESHARD_AFTER_FORWARD:
        return name.upper()
    raise MisconfigurationError(
        f"FSDPStrategy(sharding_strategy={describe(sharding_strategy)}): accepted 'FULL_SHARD' (ZeRO-3), "
        "'SHARD_GRAD_OP' (ZeRO-2), 'HYBRID_SHARD' or '_HYBRID_SHARD_ZERO2' (sharded within groups of ranks, "
        "replicated across them). For no sharding use strategy='ddp'."
    )


def check_device_mesh(device_mesh: Any, sharding_strategy: str) -> None:
    if device_mesh is None:
        return
    if sharding_strategy not in HYBRID:
        raise MisconfigurationError(
            f"FSDPStrategy(device_mesh={describe(device_mesh)}) is for hybrid sharding, but sharding_strategy is "
            f"{sharding_strategy!r}. Pass sharding_strategy='HYBRID_SHARD' too, or leave device_mesh out."
        )
    shape_given = (isinstance(device_mesh, (tuple, list)) and len(device_mesh) == 2
                   and all(is_int(n) and n > 0 for n in device_mesh))
    if not shape_given and type(device_mesh).__name__ != "DeviceMesh":
        raise MisconfigurationError(
            f"FSDPStrategy(device_mesh={describe(device_mesh)}): accepted (replicas, shard_size), two positive ints "
            "whose product is the number of ranks, or a 2-D torch.distributed.device_mesh.DeviceMesh."
        )
