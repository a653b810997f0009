"""What the ``Accelerator`` runs with: its arguments, or where they are left at their defaults, what
``framework launch`` (or ``accelerate launch``) put in the environment, under Accelerate's variable names.

``ACCELERATE_MIXED_PRECISION`` (no/fp16/bf16), ``ACCELERATE_GRADIENT_ACCUMULATION_STEPS``,
``ACCELERATE_USE_CPU``, ``ACCELERATE_USE_FSDP`` with ``FSDP_*`` (version, sharding strategy or
reshard_after_forward, offload_params, auto_wrap_policy, transformer_cls_to_wrap,
min_num_params, state_dict_type, activation_checkpointing), and ``ACCELERATE_DYNAMO_BACKEND``.
"""

from __future__ import annotations

import os
from typing import Any

from framework.accelerate.utils import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
)
from framework.errors import MisconfigurationError, describe

PRECISIONS = {"no": "32-true", "fp16": "16-mixed", "bf16": "bf16-mixed"}
_TRUE = ("1", "true", "yes", "y", "on")
# FSDP1's sharding strategies, by name and by the number older Accelerate versions wrote.
_SHARDING = {"1": "FULL_SHARD", "2": "SHARD_GRAD_OP", "3": "NO_SHARD", "4": "HYBRID_SHARD", "5": "_HYBRID_SHARD_ZERO2"}
_STATE_DICT_TYPES = {"FULL_STATE_DICT": "full", "SHARDED_STATE_DICT": "sharded", "LOCAL_STATE_DICT": "sharded"}
_WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")


def flag(name: str, default: bool = False) -> bool:
    """An environment variable read as a boolean, as Accelerate reads its flags."""
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in _TRUE


def mixed_precision(given: str | None) -> str:
    """``"no"``, ``"fp16"`` or ``"bf16"``: the argument, else ``ACCELERATE_MIXED_PRECISION``, else ``"no"``."""
    source = "mixed_precision"
    if given is None:
        given, source = os.environ.get("ACCELERATE_MIXED_PRECISION", "no"), "ACCELERATE_MIXED_PRECISION"
    value = str(getattr(given, "value", given)).lower()
    if value not in PRECISIONS:
        extra = " fp8 needs Transformer Engine or torchao, which the framework does not wrap." if value == "fp8" else ""
        raise MisconfigurationError(f"Accelerator: {source}={describe(given)} is not supported; accepted 'no', "
                                    f"'fp16' or 'bf16'.{extra}")
    return value


def accumulation_steps(given: int) -> int:
    """Batches per optimizer step: ``ACCELERATE_GRADIENT_ACCUMULATION_STEPS`` when set (it wins, as in
    Accelerate), else the argument."""
    source, value = "gradient_accumulation_steps", given
    if "ACCELERATE_GRADIENT_ACCUMULATION_STEPS" in os.environ:
        source, value = "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", os.environ["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"]
    try:
        steps = int(value)
    except (TypeError, ValueError):
        steps = 0
    if steps < 1 or isinstance(value, bool):
        raise MisconfigurationError(f"Accelerator: {source}={describe(value)} must be a positive int.")
    return steps


def strategy(fsdp_plugin: Any, ddp_kwargs: dict[str, Any], pg_kwargs: dict[str, Any]) -> Any:
    """The Strategy: FSDP2 when ``ACCELERATE_USE_FSDP`` or a plugin asks for it, else "auto" (DDP on several
    processes), with the DDP and process-group keyword handlers' options."""
    from framework.strategies import DDPStrategy

    if fsdp_plugin is None and not flag("ACCELERATE_USE_FSDP"):
        return DDPStrategy(**pg_kwargs, **ddp_kwargs) if (ddp_kwargs or pg_kwargs) else "auto"
    options = fsdp_plugin.options() if fsdp_plugin is not None else fsdp_options_from_environment()
    if options.pop("no_shard", False):
        return DDPStrategy(**pg_kwargs, **ddp_kwargs)
    from framework.strategies import FSDPStrategy

    return FSDPStrategy(**options, **pg_kwargs)


def fsdp_options_from_environment() -> dict[str, Any]:
    """``FSDPStrategy`` arguments from the ``FSDP_*`` variables Accelerate's launcher sets."""
    version = os.environ.get("FSDP_VERSION", "1").strip()
    if version not in ("1", "2"):
        raise MisconfigurationError(f"FSDP_VERSION={version!r} is not supported; accepted 1 or 2.")
    if version == "2":
        sharding = "FULL_SHARD" if flag("FSDP_RESHARD_AFTER_FORWARD", True) else "SHARD_GRAD_OP"
    else:
        given = os.environ.get("FSDP_SHARDING_STRATEGY", "FULL_SHARD").strip().upper()
        sharding = _SHARDING.get(given, given)
    return fsdp_options(
        sharding_strategy=sharding,
        offload_params=flag("FSDP_OFFLOAD_PARAMS"),
        auto_wrap_policy=os.environ.get("FSDP_AUTO_WRAP_POLICY"),
        transformer_layer_cls_to_wrap=os.environ.get("FSDP_TRANSFORMER_CLS_TO_WRAP"),
        min_num_params=int(os.environ.get("FSDP_MIN_NUM_PARAMS", "0") or 0),
        state_dict_type=os.environ.get("FSDP_STATE_DICT_TYPE"),
        activation_checkpointing=flag("FSDP_ACTIVATION_CHECKPOINTING"),
    )


def fsdp_options(sharding_strategy: str = "FULL_SHARD", offload_params: bool = False,
                 auto_wrap_policy: str | None = None, transformer_layer_cls_to_wrap: Any = None,
                 min_num_params: int = 0, state_dict_type: str | None = None,
                 activation_checkpointing: bool = False) -> dict[str, Any]:
    """Accelerate's FSDP settings as ``FSDPStrategy`` arguments (``no_shard``: plain DDP instead)."""
    sharding = str(getattr(sharding_strategy, "name", sharding_strategy)).upper()
    sharding = "_HYBRID_SHARD_ZERO2" if sharding == "HYBRID_SHARD_ZERO2" else sharding  # FSDPStrategy's spelling
    if sharding not in ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"):
        raise MisconfigurationError(f"fsdp_sharding_strategy={sharding_strategy!r} is not understood; accepted "
                                    "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2 "
                                    "(sharded within a node, replicated across nodes).")
    if sharding == "NO_SHARD":
        return {"no_shard": True}
    policy = wrap_policy(auto_wrap_policy, transformer_layer_cls_to_wrap, min_num_params)
    state_type = _STATE_DICT_TYPES.get(str(state_dict_type or "SHARDED_STATE_DICT").upper())
    if state_type is None:
        raise MisconfigurationError(f"fsdp_state_dict_type={state_dict_type!r} is not understood; accepted "
                                    f"{', '.join(_STATE_DICT_TYPES)}.")
    options: dict[str, Any] = {"sharding_strategy": sharding, "cpu_offload": offload_params,
                               "auto_wrap_policy": policy, "state_dict_type": state_type}
    if activation_checkpointing:
        options["activation_checkpointing_policy"] = policy
    return options


def wrap_policy(name: str | None, classes: Any, min_num_params: int) -> Any:
    """The auto-wrap policy: the named layer classes, a parameter count, the whole model, or one unit per block."""
    if name is None or name == "":
        return ClassNames(classes) if classes else "auto"
    name = name.strip().upper()
    if name == "TRANSFORMER_BASED_WRAP":
        return ClassNames(classes) if classes else "auto"
    if name == "SIZE_BASED_WRAP":
        return AtLeast(min_num_params or 100_000_000)
    if name == "NO_WRAP":
        return None
    raise MisconfigurationError(f"fsdp_auto_wrap_policy={name!r} is not understood; accepted "
                                f"{', '.join(_WRAP_POLICIES)}.")


class ClassNames:
    """A wrap policy matching submodules by class name (``fsdp_transformer_layer_cls_to_wrap``)."""

    def __init__(self, names: Any) -> None:
        if isinstance(names, str):
            names = names.split(",")
        self.names = frozenset(name.strip() for name in names if name.strip())

    def __call__(self, module: Any) -> bool:
        return type(module).__name__ in self.names

    def __repr__(self) -> str:
        return f"ClassNames({sorted(self.names)})"


class AtLeast:
    """A wrap policy matching submodules of at least ``min_num_params`` parameters (``SIZE_BASED_WRAP``)."""

    def __init__(self, min_num_params: int) -> None:
        self.min_num_params = min_num_params

    def __call__(self, module: Any) -> bool:
        return sum(parameter.numel() for parameter in module.parameters()) >= self.min_num_params


def refuse_plugins(**plugins: Any) -> None:
    """Refuse the plugins of engines the framework does not run (DeepSpeed, Megatron-LM ...)."""
    given = [name for name, value in plugins.items() if value is not None]
    if given:
        raise MisconfigurationError(
            f"Accelerator({given[0]}=...) is not supported: the framework runs DDP and FSDP2 (fsdp_plugin=, or "
            "`framework launch --use_fsdp`), not DeepSpeed, Megatron-LM or tensor-parallel plugins."
        )


def handlers_by_type(kwargs_handlers: list[Any] | None) -> dict[type, Any]:
    """``kwargs_handlers`` by their class, checked: known kinds, one of each."""
    found: dict[type, Any] = {}
    for handler in kwargs_handlers or []:
        kind = type(handler)
        if kind not in (DistributedDataParallelKwargs, GradScalerKwargs, InitProcessGroupKwargs, AutocastKwargs):
            raise MisconfigurationError(
                f"Accelerator(kwargs_handlers=[{describe(handler)}]): accepted DistributedDataParallelKwargs, "
                "GradScalerKwargs, InitProcessGroupKwargs and AutocastKwargs from framework.accelerate.utils."
            )
        if kind in found:
            raise MisconfigurationError(f"Accelerator(kwargs_handlers=...): two {kind.__name__} given; pass one.")
        found[kind] = handler
    return found


def accumulation_settings(plugin: GradientAccumulationPlugin | None, steps: int) -> dict[str, Any]:
    """``GradientState`` arguments from the plugin or the step count (the launcher's count wins)."""
    if plugin is None:
        return {"num_steps": accumulation_steps(steps)}
    if steps != 1:
        raise MisconfigurationError("Accelerator: pass gradient_accumulation_steps or gradient_accumulation_plugin, "
                                    "not both.")
    return {"num_steps": accumulation_steps(plugin.num_steps or 1),
            "sync_with_dataloader": plugin.sync_with_dataloader, "sync_each_batch": plugin.sync_each_batch,
            "adjust_scheduler": plugin.adjust_scheduler}


def process_group_options(handler: InitProcessGroupKwargs | None) -> dict[str, Any]:
    """The strategy's backend and timeout from ``InitProcessGroupKwargs``."""
    if handler is None:
        return {}
    options: dict[str, Any] = {}
    if handler.backend is not None:
        options["process_group_backend"] = handler.backend
    if handler.timeout is not None:
        options["timeout"] = handler.timeout
    return options


def compile_options(dynamo_backend: Any) -> bool | dict[str, Any]:
    """The Runtime's ``compile=`` from ``dynamo_backend`` or the launcher's ``ACCELERATE_DYNAMO_*``."""
    backend = dynamo_backend if dynamo_backend is not None else os.environ.get("ACCELERATE_DYNAMO_BACKEND")
    backend = str(getattr(backend, "value", backend) or "no").lower()
    if backend == "no":
        return False
    options: dict[str, Any] = {"backend": backend}
    if os.environ.get("ACCELERATE_DYNAMO_MODE"):
        options["mode"] = os.environ["ACCELERATE_DYNAMO_MODE"]
    if flag("ACCELERATE_DYNAMO_USE_FULLGRAPH"):
        options["fullgraph"] = True
    return options


def check_wrapped_classes(strategy: Any, model: Any) -> None:
    """A transformer layer class to wrap that the model does not have is a typo, said now (as Accelerate does)."""
    policy = getattr(strategy, "auto_wrap_policy", None)
    names = getattr(policy, "names", None)
    if not names:
        return
    present = {type(module).__name__ for module in model.modules()}
    missing = sorted(names - present)
    if missing:
        raise MisconfigurationError(
            f"fsdp_transformer_layer_cls_to_wrap names {missing}, which {type(model).__name__} does not contain; "
            f"its module classes are {sorted(present)}."
        )
