"""What the ``Accelerator`` runs with: its arguments, or where they are left at their defaults, what
``framework launch`` (or ``accelerate launch``) put in the environment, under Accelerate's variable names.

The variables are read through :mod:`framework.accelerate.config_keys`, the table the launcher writes them
through: mixed precision, gradient accumulation steps, CPU ranks, FSDP (version, sharding strategy or
reshard_after_forward, offload_params, auto_wrap_policy, transformer_cls_to_wrap, min_num_params,
state_dict_type, activation_checkpointing) and torch.compile's backend, mode and fullgraph.
"""

from __future__ import annotations

from typing import Any

from framework.accelerate.config_keys import KEYS, USE_FSDP, from_environment
from framework.accelerate.config_values import SHARDING, Refused, mixed_precisions, sharding_strategy
from framework.accelerate.utils.configuration import FullyShardedDataParallelPlugin, GradientAccumulationPlugin
from framework.accelerate.utils.environment import parse_flag_from_env as flag
from framework.accelerate.utils.environment import str_to_bool
from framework.accelerate.utils.fsdp_utils import wrap_policy
from framework.accelerate.utils.kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    FP8RecipeKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)
from framework.errors import MisconfigurationError, describe

_STATE_DICT_TYPES = {"FULL_STATE_DICT": "full", "SHARDED_STATE_DICT": "sharded", "LOCAL_STATE_DICT": "sharded"}


def mixed_precision(given: str | None) -> str:
    """``"no"``, ``"fp16"``, ``"bf16"`` or a name ``register_precision`` added: the argument, else
    ``ACCELERATE_MIXED_PRECISION``, else ``"no"``."""
    source = "mixed_precision"
    if given is None:
        given, source = from_environment("mixed_precision"), KEYS["mixed_precision"].variable
    value = str(getattr(given, "value", given)).lower()
    accepted = mixed_precisions()
    if value not in accepted:
        extra = " fp8 needs Transformer Engine or torchao, which the framework does not wrap." if value == "fp8" else ""
        raise MisconfigurationError(f"Accelerator: {source}={describe(given)} is not supported; accepted "
                                    f"{', '.join(repr(name) for name in accepted)}.{extra}")
    return value


def accumulation_steps(given: int) -> int:
    """Batches per optimizer step: ``ACCELERATE_GRADIENT_ACCUMULATION_STEPS`` when set (it wins, as in
    Accelerate), else the argument."""
    source, value = "gradient_accumulation_steps", given
    if from_environment("gradient_accumulation_steps") is not None:
        source, value = KEYS["gradient_accumulation_steps"].variable, from_environment("gradient_accumulation_steps")
    try:
        steps = int(value)
    except (TypeError, ValueError):
        steps = 0
    if steps < 1 or isinstance(value, bool):
        raise MisconfigurationError(f"Accelerator: {source}={describe(value)} must be a positive int.")
    return steps


def strategy(fsdp_plugin: FullyShardedDataParallelPlugin | None, ddp_kwargs: dict[str, Any],
             pg_kwargs: dict[str, Any]) -> Any:
    """The Strategy: FSDP2 when ``ACCELERATE_USE_FSDP`` or a plugin asks for it, else "auto" (DDP on several
    processes), with the DDP and process-group keyword handlers' options."""
    from framework.strategies import DDPStrategy

    if fsdp_plugin is None and not flag(USE_FSDP):
        return DDPStrategy(**pg_kwargs, **ddp_kwargs) if (ddp_kwargs or pg_kwargs) else "auto"
    options = fsdp_options(fsdp_plugin or FullyShardedDataParallelPlugin())
    if options.pop("no_shard", False):
        return DDPStrategy(**pg_kwargs, **ddp_kwargs)
    from framework.strategies import FSDPStrategy

    return FSDPStrategy(**options, **pg_kwargs)


def fsdp_options(plugin: FullyShardedDataParallelPlugin) -> dict[str, Any]:
    """The plugin's settings as ``FSDPStrategy`` arguments (``no_shard``: plain DDP instead); each field left None
    takes the launcher's ``FSDP_*`` variable, else Accelerate's default."""
    _refuse_unsupported_fields(plugin)
    version = str(_given(plugin.fsdp_version, "fsdp_version")).strip()
    if version not in ("1", "2"):
        raise MisconfigurationError(f"fsdp_version={version!r} is not supported; accepted 1 or 2.")
    if version == "2":
        reshard = plugin.reshard_after_forward
        sharding = "FULL_SHARD" if (_flag("fsdp_reshard_after_forward") if reshard is None
                                    else _truthy(reshard)) else "SHARD_GRAD_OP"
    else:
        given = getattr(plugin.sharding_strategy, "name", None) or _given(plugin.sharding_strategy,
                                                                          "fsdp_sharding_strategy")
        try:
            sharding = sharding_strategy(given)
        except Refused:
            raise MisconfigurationError(
                f"fsdp_sharding_strategy={str(given).strip().upper()!r} is not understood; accepted "
                f"{', '.join(SHARDING[:-1])} or {SHARDING[-1]} (sharded within a node, replicated across nodes)."
            ) from None
    sharding = "_HYBRID_SHARD_ZERO2" if sharding == "HYBRID_SHARD_ZERO2" else sharding  # FSDPStrategy's spelling
    if sharding == "NO_SHARD":
        return {"no_shard": True}
    policy = wrap_policy(_given(plugin.auto_wrap_policy, "fsdp_auto_wrap_policy"),
                         _given(plugin.transformer_cls_names_to_wrap, "fsdp_transformer_layer_cls_to_wrap"),
                         int(_given(plugin.min_num_params, "fsdp_min_num_params")))
    options: dict[str, Any] = {"sharding_strategy": sharding, "cpu_offload": _offloads(plugin.cpu_offload),
                               "auto_wrap_policy": policy, "state_dict_type": _state_dict_type(plugin)}
    checkpointing = plugin.activation_checkpointing
    if _flag("fsdp_activation_checkpointing") if checkpointing is None else checkpointing:
        options["activation_checkpointing_policy"] = policy
    return options


def _given(value: Any, key: str) -> Any:
    """The plugin's value; where it is None, the launcher's variable for ``key``; else Accelerate's default."""
    return value if value is not None else from_environment(key)


def _flag(key: str) -> bool:
    """The launcher's boolean for ``key``, else Accelerate's default."""
    return flag(KEYS[key].variable, bool(KEYS[key].default))


def _truthy(value: Any) -> bool:
    return bool(str_to_bool(value)) if isinstance(value, str) else bool(value)


def _offloads(cpu_offload: Any) -> bool:
    """Whether parameters live on the CPU: a bool, torch's ``CPUOffload(offload_params=...)`` or
    ``CPUOffloadPolicy``, or, unset, ``FSDP_OFFLOAD_PARAMS``."""
    if cpu_offload is None:
        return _flag("fsdp_offload_params")
    if type(cpu_offload).__name__ == "CPUOffloadPolicy":
        return True
    return bool(getattr(cpu_offload, "offload_params", cpu_offload))


def _state_dict_type(plugin: FullyShardedDataParallelPlugin) -> str:
    """"full" or "sharded": the plugin's ``state_dict_type``, else the kind of its ``state_dict_config``, else
    ``FSDP_STATE_DICT_TYPE``, else sharded."""
    given = plugin.state_dict_type
    if given is None and plugin.state_dict_config is not None:
        full = type(plugin.state_dict_config).__name__.startswith("Full")
        given = "FULL_STATE_DICT" if full else "SHARDED_STATE_DICT"
    given = str(getattr(given, "name", None) or _given(given, "fsdp_state_dict_type")).upper()
    if given not in _STATE_DICT_TYPES:
        raise MisconfigurationError(f"fsdp_state_dict_type={given!r} is not understood; accepted "
                                    f"{', '.join(_STATE_DICT_TYPES)}.")
    return _STATE_DICT_TYPES[given]


def _refuse_unsupported_fields(plugin: FullyShardedDataParallelPlugin) -> None:
    plugin.validate_mixed_precision_policy()
    for name, what in (("ignored_modules", "modules left out of sharding"),
                       ("param_init_fn", "parameter initialiser for meta-device models"),
                       ("activation_checkpointing_offload", "offloading of checkpointed activations")):
        if getattr(plugin, name):
            raise MisconfigurationError(f"FullyShardedDataParallelPlugin({name}=...) is not supported: the "
                                        f"framework's FSDP2 has no {what}.")


def refuse_plugins(**plugins: Any) -> None:
    """Refuse the plugins of engines the framework does not run (Megatron-LM, tensor-parallel plugins)."""
    given = [name for name, value in plugins.items() if value is not None]
    if given:
        raise MisconfigurationError(
            f"Accelerator({given[0]}=...) is not supported: the framework runs DDP, FSDP2 (fsdp_plugin=, or "
            "`framework launch --use_fsdp`) and DeepSpeed (deepspeed_plugin=), not Megatron-LM or tensor-parallel "
            "plugins."
        )


def one_deepspeed_plugin(plugin: Any, plugins: Any) -> Any:
    """The one DeepSpeed plugin given as ``deepspeed_plugin`` or ``deepspeed_plugins`` (a plugin or a dict of
    one); several (one per model) are refused."""
    if plugins is None:
        return plugin
    if plugin is not None:
        raise MisconfigurationError("Accelerator: give deepspeed_plugin or deepspeed_plugins, not both.")
    if isinstance(plugins, dict):
        if len(plugins) != 1:
            raise MisconfigurationError(
                f"Accelerator(deepspeed_plugins={{{', '.join(map(repr, plugins))}}}): one DeepSpeed engine per "
                "Accelerator is supported here; give one plugin.")
        return next(iter(plugins.values()))
    return plugins


_HANDLERS = (DistributedDataParallelKwargs, GradScalerKwargs, InitProcessGroupKwargs, AutocastKwargs, ProfileKwargs)


def handlers_by_type(kwargs_handlers: list[Any] | None) -> dict[type, Any]:
    """``kwargs_handlers`` by their class, checked: known kinds, one of each."""
    found: dict[type, Any] = {}
    for handler in kwargs_handlers or []:
        kind = type(handler)
        if kind is FP8RecipeKwargs:
            raise MisconfigurationError("Accelerator(kwargs_handlers=[FP8RecipeKwargs(...)]) is not supported: the "
                                        "framework does not train in fp8; use mixed_precision='bf16'.")
        if kind not in _HANDLERS:
            raise MisconfigurationError(
                f"Accelerator(kwargs_handlers=[{describe(handler)}]): accepted "
                f"{', '.join(handler.__name__ for handler in _HANDLERS)} from framework.accelerate.utils."
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
    """The strategy's backend and timeout from ``InitProcessGroupKwargs``: what it sets apart from the defaults
    (its default backend, nccl, means the device's own: gloo on CPU)."""
    given = handler.to_kwargs() if handler is not None else {}
    if "init_method" in given:
        raise MisconfigurationError(f"InitProcessGroupKwargs(init_method={given['init_method']!r}) is not supported: "
                                    "the ranks meet at the address the launcher gives (MASTER_ADDR/MASTER_PORT).")
    names = {"backend": "process_group_backend", "timeout": "timeout"}
    return {names[key]: value for key, value in given.items() if value is not None}


def ddp_options(handler: DistributedDataParallelKwargs | None) -> dict[str, Any]:
    """``DDPStrategy`` arguments from ``DistributedDataParallelKwargs``: DDP's options that differ from the
    defaults, and its communication hook."""
    if handler is None:
        return {}
    return {**handler.to_kwargs(), **handler.comm_hook_options()}


def compile_options(dynamo_backend: Any, dynamo_plugin: Any = None) -> bool | dict[str, Any]:
    """The Runtime's ``compile=`` from ``dynamo_plugin``, ``dynamo_backend`` or the launcher's
    ``ACCELERATE_DYNAMO_*``."""
    if dynamo_plugin is not None and dynamo_plugin.disable:
        return False
    regional = getattr(dynamo_plugin, "use_regional_compilation", None)
    if regional if regional is not None else _flag("dynamo_use_regional_compilation"):
        asked = ("TorchDynamoPlugin(use_regional_compilation=True)" if regional
                 else "--dynamo_use_regional_compilation (ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION)")
        raise MisconfigurationError(f"{asked} is not supported: the framework compiles the whole model's forward. "
                                    "Leave it out.")
    given = getattr(dynamo_plugin, "backend", None) or dynamo_backend
    backend = given if given is not None else from_environment("dynamo_backend", None)
    backend = str(getattr(backend, "value", backend) or "no").lower()
    if backend == "no":
        return False
    options: dict[str, Any] = {"backend": backend}
    mode = getattr(dynamo_plugin, "mode", None) or from_environment("dynamo_mode", None)
    if mode:
        options["mode"] = mode
    fullgraph = getattr(dynamo_plugin, "fullgraph", None)
    if fullgraph if fullgraph is not None else _flag("dynamo_use_fullgraph"):
        options["fullgraph"] = True
    for name in ("dynamic", "options"):
        if getattr(dynamo_plugin, name, None) is not None:
            options[name] = getattr(dynamo_plugin, name)
    if "dynamic" not in options and _flag("dynamo_use_dynamic"):
        options["dynamic"] = True
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
