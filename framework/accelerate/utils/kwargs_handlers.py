"""The keyword-argument holders given as ``Accelerator(kwargs_handlers=[...])``, with Accelerate's fields and
defaults: options for DDP (its communication hooks included), the fp16 loss scaler, the process group, autocast
and the profiler."""

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch

from framework.accelerate.utils.enums import DDPCommunicationHookType
from framework.errors import MisconfigurationError, describe


class KwargsHandler:
    """What every handler shares: ``to_dict()`` (its fields) and ``to_kwargs()`` (those that differ from the
    defaults, the only ones passed on)."""

    def to_dict(self) -> dict[str, Any]:
        """Every field with its value."""
        return copy.deepcopy(self.__dict__)

    def to_kwargs(self) -> dict[str, Any]:
        """The fields whose values differ from the class's defaults."""
        defaults = type(self)().to_dict()
        return {key: value for key, value in self.to_dict().items() if defaults[key] != value}


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Options for ``torch.nn.parallel.DistributedDataParallel``, and a gradient communication hook:
    ``comm_hook`` (``DDPCommunicationHookType.FP16``/``BF16`` compress the gradients, ``POWER_SGD``/
    ``BATCHED_POWER_SGD`` approximate them, with ``comm_state_option`` for ``PowerSGDState``) and
    ``comm_wrapper`` (FP16/BF16 compression around a PowerSGD hook).

    Example::

        Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(comm_hook=DDPCommunicationHookType.FP16)])
    """

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    comm_hook: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_wrapper: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_state_option: dict = field(default_factory=dict)

    def to_dict(self, ignore_keys: tuple[str, ...] = ("comm_hook", "comm_wrapper", "comm_state_option")
                ) -> dict[str, Any]:
        """The DistributedDataParallel options (the hook's fields left out)."""
        return {key: value for key, value in super().to_dict().items() if key not in ignore_keys}

    def comm_hook_options(self) -> dict[str, Any]:
        """The hook as ``DDPStrategy`` arguments (``ddp_comm_hook``, ``ddp_comm_wrapper``, ``ddp_comm_state``)."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

        hooks = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook,
                 "power_sgd": powerSGD_hook.powerSGD_hook, "batched_power_sgd": powerSGD_hook.batched_powerSGD_hook}
        wrappers = {"fp16": default_hooks.fp16_compress_wrapper, "bf16": default_hooks.bf16_compress_wrapper}
        hook, wrapper = _hook_name(self.comm_hook, "comm_hook", hooks), _hook_name(self.comm_wrapper, "comm_wrapper",
                                                                                   wrappers)
        if hook == "no":
            return {}
        options: dict[str, Any] = {"ddp_comm_hook": hooks[hook]}
        if wrapper != "no":
            options["ddp_comm_wrapper"] = wrappers[wrapper]
        if hook in ("power_sgd", "batched_power_sgd"):
            options["ddp_comm_state"] = powerSGD_hook.PowerSGDState(None, **self.comm_state_option)
        return options

    def register_comm_hook(self, model: Any) -> None:
        """Register the hook on a ``DistributedDataParallel`` model (``prepare`` does it for prepared models)."""
        options = self.comm_hook_options()
        if options:
            hook = options["ddp_comm_hook"]
            if "ddp_comm_wrapper" in options:
                hook = options["ddp_comm_wrapper"](hook)
            model.register_comm_hook(state=options.get("ddp_comm_state"), hook=hook)


def _hook_name(value: Any, argument: str, accepted: dict[str, Any]) -> str:
    name = str(getattr(value, "value", value)).lower()
    if name != "no" and name not in accepted:
        raise MisconfigurationError(f"DistributedDataParallelKwargs({argument}={describe(value)}): accepted "
                                    f"{', '.join(['no', *accepted])} (DDPCommunicationHookType members).")
    return name


@dataclass
class GradScalerKwargs(KwargsHandler):
    """Options for the fp16 ``torch.amp.GradScaler``."""

    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    enabled: bool = True


@dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """Options for the process group: ``backend`` (left at its default, gloo on CPU and nccl on CUDA),
    ``init_method`` and ``timeout``."""

    backend: str | None = "nccl"
    init_method: str | None = None
    timeout: timedelta | None = None


@dataclass
class AutocastKwargs(KwargsHandler):
    """Options for autocast: ``enabled=False`` runs the forward passes in fp32."""

    enabled: bool = True
    cache_enabled: bool | None = None


@dataclass
class ProfileKwargs(KwargsHandler):
    """``torch.profiler`` settings for ``accelerator.profile()``: ``activities`` (``"cpu"``, ``"cuda"``),
    ``schedule_option`` (``wait``/``warmup``/``active``/``repeat``/``skip_first``), ``on_trace_ready``,
    ``record_shapes``, ``profile_memory``, ``with_stack``, ``with_flops``, ``with_modules``, and
    ``output_trace_dir``: each process writes its Chrome trace there as ``profile_<process index>.json``.

    Example::

        accelerator = Accelerator(kwargs_handlers=[ProfileKwargs(activities=["cpu"], output_trace_dir="traces")])
        with accelerator.profile() as profiler:
            train_step()
    """

    activities: list[str] | None = None
    schedule_option: dict[str, int] | None = None
    on_trace_ready: Callable[..., Any] | None = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    output_trace_dir: str | os.PathLike | None = None

    def build(self) -> torch.profiler.profile:
        """The ``torch.profiler.profile`` these settings describe."""
        activities = None if self.activities is None else [_activity(name) for name in self.activities]
        schedule = None if self.schedule_option is None else torch.profiler.schedule(**self.schedule_option)
        return torch.profiler.profile(activities=activities, schedule=schedule, on_trace_ready=self.on_trace_ready,
                                      record_shapes=self.record_shapes, profile_memory=self.profile_memory,
                                      with_stack=self.with_stack, with_flops=self.with_flops,
                                      with_modules=self.with_modules)


def _activity(name: Any) -> torch.profiler.ProfilerActivity:
    known = {"cpu": torch.profiler.ProfilerActivity.CPU, "cuda": torch.profiler.ProfilerActivity.CUDA}
    if isinstance(name, torch.profiler.ProfilerActivity):
        return name
    if name not in known:
        raise MisconfigurationError(f"ProfileKwargs(activities=[..., {describe(name)}]): accepted 'cpu' and 'cuda'.")
    return known[name]


@dataclass
class FP8RecipeKwargs(KwargsHandler):
    """Accelerate's fp8 recipe. The framework does not train in fp8: an Accelerator given one refuses it."""

    opt_level: str | None = None
    use_autocast_during_eval: bool | None = None
    margin: int | None = None
    interval: int | None = None
    fp8_format: str | None = None
    amax_history_len: int | None = None
    amax_compute_algo: str | None = None
    override_linear_precision: tuple[bool, bool, bool] | None = None
    use_mxfp8_block_scaling: bool | None = None
    backend: str | None = None
