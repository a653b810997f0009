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
    """Options for ``torch.nn.parallel.DistributedDataParallel``, and a gradient communication hook. They apply
    where the Accelerator wraps models in DDP (several processes, without DeepSpeed, and without FSDP or with its
    NO_SHARD); a field left at its default is not passed on, so DDP's own default holds.

    Example::

        Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(comm_hook=DDPCommunicationHookType.FP16)])

    :param dim: DDP's ``dim``, the dimension its ``scatter``/``gather`` helpers use; with one device per
        process, as here, the batch is not split. Default 0.
    :param broadcast_buffers: True (the default): rank 0's buffers (BatchNorm's running statistics ...) are
        copied to every rank at each forward; False: each rank keeps its own.
    :param bucket_cap_mb: the size in MiB of the buckets DDP all-reduces gradients in; default 25.
    :param find_unused_parameters: True: DDP looks for parameters the forward did not use, so a model whose
        forward skips some can train (slower); default False.
    :param check_reduction: DDP's deprecated argument, which torch ignores; default False.
    :param gradient_as_bucket_view: True: the gradients are views into DDP's buckets (less memory, no copy);
        default False.
    :param static_graph: True: tells DDP the set of used parameters is the same at every step, which lets it
        optimize (and train some models ``find_unused_parameters`` cannot); default False.
    :param comm_hook: how gradients are communicated: ``DDPCommunicationHookType.FP16``/``BF16`` compress them
        for the all-reduce, ``POWER_SGD``/``BATCHED_POWER_SGD`` send a low-rank approximation; ``NO`` (the
        default): DDP's plain all-reduce.
    :param comm_wrapper: ``FP16`` or ``BF16``: the hook's communication runs in that dtype (a wrapper around
        ``comm_hook``, meant for the PowerSGD ones); ``NO`` (the default): no wrapper. Not read without a hook.
    :param comm_state_option: keyword arguments for PowerSGD's ``PowerSGDState`` (``matrix_approximation_rank``,
        ``start_powerSGD_iter`` ...), read with a PowerSGD hook only; default empty.
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
    """Options for the loss scaler of ``mixed_precision="fp16"`` (``torch.amp.GradScaler``); no effect in other
    precisions, nor under DeepSpeed, whose engine scales the loss itself.

    :param init_scale: the loss scale to start from; default 65536.0 (2**16).
    :param growth_factor: what the scale is multiplied by after ``growth_interval`` steps without inf/nan
        gradients; default 2.0.
    :param backoff_factor: what the scale is multiplied by when a step finds inf/nan gradients (that step is
        skipped); default 0.5.
    :param growth_interval: how many steps in a row without inf/nan gradients before the scale grows; default 2000.
    :param enabled: False: no loss scaling, and no step is skipped; default True.
    """

    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    enabled: bool = True


@dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """Options for the process group the Accelerator's processes join (DDP, FSDP and DeepSpeed alike).

    :param backend: the ``torch.distributed`` backend; ``"nccl"`` (the default) or None: the device's own,
        nccl on CUDA and gloo on CPU; another name (``"gloo"`` ...) is used as given.
    :param init_method: only None (the default) is accepted: the processes meet at the address the launcher
        gives (``MASTER_ADDR``/``MASTER_PORT``).
    :param timeout: how long a collective may wait before it fails, a ``datetime.timedelta``; None (the
        default): 30 minutes.
    """

    backend: str | None = "nccl"
    init_method: str | None = None
    timeout: timedelta | None = None


@dataclass
class AutocastKwargs(KwargsHandler):
    """Options for ``accelerator.autocast()``, the mixed-precision context for computation outside the prepared
    models' forward (which autocasts either way).

    :param enabled: False: ``accelerator.autocast()`` is a context that does nothing, so the computation in it
        runs in its tensors' own dtypes; True (the default): autocast to the Accelerator's mixed precision.
    :param cache_enabled: accepted for Accelerate's sake; no effect (the precision's autocast keeps its own
        weight-cast cache setting).
    """

    enabled: bool = True
    cache_enabled: bool | None = None


@dataclass
class ProfileKwargs(KwargsHandler):
    """``torch.profiler`` settings for ``accelerator.profile()``.

    Example::

        accelerator = Accelerator(kwargs_handlers=[ProfileKwargs(activities=["cpu"], output_trace_dir="traces")])
        with accelerator.profile() as profiler:
            train_step()

    :param activities: what to record: a list of ``"cpu"`` and ``"cuda"`` (or ``ProfilerActivity`` members);
        None (the default): torch's choice, the CPU and CUDA where it is available.
    :param schedule_option: ``torch.profiler.schedule``'s arguments (``wait``, ``warmup``, ``active``,
        ``repeat``, ``skip_first``) for profiling some steps of a loop that calls ``profiler.step()``; None (the
        default): the whole block is recorded.
    :param on_trace_ready: called with the profiler whenever a trace is ready: at the end of each scheduled
        cycle, or of the block without a schedule (``torch.profiler.tensorboard_trace_handler(...)``, say); None
        (the default): nothing is called.
    :param record_shapes: True: record the operators' input shapes; default False.
    :param profile_memory: True: record the tensors' memory allocations; default False.
    :param with_stack: True: record the source location of each operator; default False.
    :param with_flops: True: estimate the FLOPs of matrix products and convolutions; default False.
    :param with_modules: True: record which module each operator ran in; default False.
    :param output_trace_dir: a folder: when the block ends each process writes its Chrome trace there as
        ``profile_<process index>.json`` (the folder is created), then waits for the others; None (the
        default): nothing is written.
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
    """Accelerate's fp8 recipe. The framework does not train in fp8: an Accelerator given one in
    ``kwargs_handlers`` refuses it, so no field has an effect; they are kept so that code building one still
    runs.

    :param opt_level: MS-AMP's optimization level in Accelerate; not used.
    :param use_autocast_during_eval: whether evaluation runs in fp8 in Accelerate; not used.
    :param margin: Transformer Engine's scaling-factor margin in Accelerate; not used.
    :param interval: Transformer Engine's scaling-factor update interval in Accelerate; not used.
    :param fp8_format: ``"HYBRID"`` or ``"E4M3"`` in Accelerate; not used.
    :param amax_history_len: Transformer Engine's amax history length in Accelerate; not used.
    :param amax_compute_algo: ``"max"`` or ``"most_recent"`` in Accelerate; not used.
    :param override_linear_precision: which of a linear layer's three products stay in higher precision in
        Accelerate; not used.
    :param use_mxfp8_block_scaling: Transformer Engine's MXFP8 block scaling in Accelerate; not used.
    :param backend: ``"TE"`` or ``"MSAMP"`` in Accelerate; not used.
    """

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
