"""``Accelerator``: Hugging Face Accelerate's way of writing a training loop, on the framework's Runtime."""

import contextlib
import gc
import os
from collections import OrderedDict
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from framework.accelerate import deepspeed, profiling, settings, tracking
from framework.accelerate.config_keys import KEYS
from framework.accelerate.config_values import mixed_precisions
from framework.accelerate.data import PreparedDataLoader, skip_first_batches
from framework.accelerate.files import FileMethods
from framework.accelerate.gradient_state import GradientState
from framework.accelerate.preparation import PrepareMethods
from framework.accelerate.prepared import AcceleratedOptimizer, AcceleratedScheduler
from framework.accelerate.processes import ProcessControl
from framework.accelerate.state import AcceleratorState
from framework.accelerate.synchronization import GradientSync
from framework.accelerate.tracking import TrackerMethods
from framework.accelerate.utils.configuration import (
    DataLoaderConfiguration,
    FullyShardedDataParallelPlugin,
    GradientAccumulationPlugin,
    ProjectConfiguration,
    TorchDynamoPlugin,
)
from framework.accelerate.utils.deepspeed import DeepSpeedPlugin
from framework.accelerate.utils.kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)
from framework.accelerate.utils.shared_state import register_accelerator
from framework.errors import MisconfigurationError
from framework.runtime import Runtime
from framework.runtime.wrappers import RuntimeModule, original_module, original_optimizer
from framework.strategies.dtensors import whole


class Accelerator(PrepareMethods, ProcessControl, GradientSync, TrackerMethods, FileMethods):
    """Accelerate's ``Accelerator`` on the framework's Runtime: change ``from accelerate import Accelerator`` to
    ``from framework.accelerate import Accelerator`` and the loop runs, on one process or on the ranks
    ``framework launch`` (or torchrun) started, CPU ranks included.

    Example::

        accelerator = Accelerator(mixed_precision="bf16", gradient_accumulation_steps=2)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()

    Arguments as Accelerate's; the launcher's settings (``ACCELERATE_*`` environment variables)
    apply where ``mixed_precision``, ``dynamo_backend`` or ``fsdp_plugin`` is left out, and its
    gradient accumulation steps, where set, win over the argument, as in Accelerate.
    DeepSpeed runs on its own engine (``deepspeed_plugin``, the ``deepspeed`` extra). Megatron-LM, tensor
    parallelism plugins, fp8 and ``split_batches`` are refused.

    :param device_placement: ``True`` (the default): ``prepare`` puts models and batches on the device.
    :param split_batches: only ``False`` is accepted: each process takes whole batches.
    :param mixed_precision: ``"no"``, ``"fp16"``, ``"bf16"`` or a name ``register_precision`` added; ``None`` (the
        default): the launcher's, else ``"no"``.
    :param gradient_accumulation_steps: batches per optimizer step (default 1); see ``accumulate``.
    :param cpu: ``True`` runs on the CPU (as ``ACCELERATE_USE_CPU`` does); ``False`` (the default): the best device.
    :param dataloader_config: a ``DataLoaderConfiguration`` (``even_batches``, ``use_seedable_sampler``,
        ``data_seed`` ...); ``None`` (the default): its defaults.
    :param deepspeed_plugin: a ``DeepSpeedPlugin``: train on DeepSpeed's engine (``framework.accelerate.deepspeed``
        says how the loop's calls map to it); ``None`` (the default): DeepSpeed where the launcher asked for it
        (``--use_deepspeed``), else not.
    :param fsdp_plugin: a ``FullyShardedDataParallelPlugin``: train with FSDP2; ``None`` (the default): DDP on
        several processes, unless the launcher asked for FSDP.
    :param torch_tp_plugin: only ``None`` is accepted.
    :param megatron_lm_plugin: only ``None`` is accepted.
    :param rng_types: accepted for Accelerate's sake; no effect (prepared loaders agree on their order).
    :param log_with: ``"tensorboard"``, ``"wandb"``, ``"mlflow"``, ``"all"`` (those installed), a ``GeneralTracker``
        or a ``framework.loggers`` Logger, or a list; ``init_trackers`` starts them. ``None`` (the default): none.
    :param project_dir: the project folder (``save_state``'s automatic naming, the trackers' folder).
    :param project_config: a ``ProjectConfiguration``; ``None`` (the default): its defaults.
    :param gradient_accumulation_plugin: a ``GradientAccumulationPlugin``, instead of
        ``gradient_accumulation_steps`` (not both).
    :param step_scheduler_with_optimizer: ``True`` (the default): a prepared scheduler steps only after an
        optimizer step that happened, ``num_processes`` times; ``False``: at each of its ``step()`` calls.
    :param kwargs_handlers: at most one each of ``DistributedDataParallelKwargs``, ``InitProcessGroupKwargs``,
        ``GradScalerKwargs``, ``AutocastKwargs`` (read by ``autocast()`` only) and ``ProfileKwargs``.
    :param dynamo_backend: a ``torch.compile`` backend (a name or ``DynamoBackend``) for the prepared models'
        forward; ``None`` (the default): the launcher's, else ``"no"`` (not compiled).
    :param dynamo_plugin: a ``TorchDynamoPlugin`` (backend, mode, fullgraph ...); its backend wins over
        ``dynamo_backend``.
    :param deepspeed_plugins: one ``DeepSpeedPlugin``, or a dict holding one (several, one per model, are not
        supported); instead of ``deepspeed_plugin``.
    :param parallelism_config: only ``None`` is accepted.
    :raises MisconfigurationError: where an argument is not one accepted above, or two exclude each other.
    """

    def __init__(self, device_placement: bool = True, split_batches: bool = False, mixed_precision: str | None = None,
                 gradient_accumulation_steps: int = 1, cpu: bool = False,
                 dataloader_config: DataLoaderConfiguration | None = None,
                 deepspeed_plugin: DeepSpeedPlugin | None = None,
                 fsdp_plugin: FullyShardedDataParallelPlugin | None = None, torch_tp_plugin: Any = None,
                 megatron_lm_plugin: Any = None,
                 rng_types: Any = None, log_with: Any = None, project_dir: str | os.PathLike | None = None,
                 project_config: ProjectConfiguration | None = None,
                 gradient_accumulation_plugin: GradientAccumulationPlugin | None = None,
                 step_scheduler_with_optimizer: bool = True, kwargs_handlers: list[Any] | None = None,
                 dynamo_backend: Any = None, dynamo_plugin: TorchDynamoPlugin | None = None,
                 deepspeed_plugins: Any = None, parallelism_config: Any = None) -> None:
        settings.refuse_plugins(torch_tp_plugin=torch_tp_plugin, megatron_lm_plugin=megatron_lm_plugin,
                                parallelism_config=parallelism_config)
        self.deepspeed_plugin = deepspeed.plugin_asked(settings.one_deepspeed_plugin(deepspeed_plugin,
                                                                                     deepspeed_plugins))
        if self.deepspeed_plugin is not None and fsdp_plugin is not None:
            raise MisconfigurationError("Accelerator: give deepspeed_plugin or fsdp_plugin, not both.")
        self.dataloader_config = dataloader_config or DataLoaderConfiguration(split_batches=split_batches)
        if self.dataloader_config.split_batches:
            raise MisconfigurationError("Accelerator(split_batches=True) is not supported: each process takes whole "
                                        "batches. Divide the batch size by the number of processes instead.")
        self.project_configuration = project_config or ProjectConfiguration()
        if project_dir is not None:
            self.project_configuration.set_directories(os.fspath(project_dir))
        handlers = settings.handlers_by_type(kwargs_handlers)
        self.ddp_handler, self.init_handler = handlers.get(DistributedDataParallelKwargs), handlers.get(
            InitProcessGroupKwargs)
        self.scaler_handler, self.autocast_handler = handlers.get(GradScalerKwargs), handlers.get(AutocastKwargs)
        self.profile_handler = handlers.get(ProfileKwargs)
        self.fsdp_plugin, self.dynamo_plugin = fsdp_plugin, dynamo_plugin
        self._mixed_precision = settings.mixed_precision(mixed_precision)
        accumulation = settings.accumulation_settings(gradient_accumulation_plugin, gradient_accumulation_steps)
        if self.deepspeed_plugin is not None:
            self._mixed_precision, accumulation["num_steps"] = deepspeed.settle(
                self.deepspeed_plugin, self._mixed_precision, accumulation["num_steps"])
        self.gradient_state = GradientState(**accumulation)
        self._runtime = self._make_runtime(cpu, dynamo_backend)
        self.device_placement = device_placement
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.rng_types = rng_types
        self.step = 0  # batches since the last synced one, as Accelerate counts them
        self._models: list[RuntimeModule] = []
        self._parameter_names: list[dict[nn.Parameter, str]] = []
        self._optimizers: list[AcceleratedOptimizer] = []
        self._schedulers: list[AcceleratedScheduler] = []
        self._dataloaders: list[PreparedDataLoader] = []
        self._custom_objects: list[Any] = []
        # OrderedDict, not dict: torch's RemovableHandle keeps a weak reference to it, which a dict cannot have.
        self._save_state_pre_hooks: dict[int, Any] = OrderedDict()
        self._load_state_pre_hooks: dict[int, Any] = OrderedDict()
        self._requested_trackers = tracking.requested_trackers(log_with)
        self.trackers: list[Any] = []
        register_accelerator(self)

    def _make_runtime(self, cpu: bool, dynamo_backend: Any) -> Runtime:
        """The Runtime on this process's device, its process group joined where a launcher started ranks."""
        group_options = settings.process_group_options(self.init_handler)
        if self.deepspeed_plugin is not None:
            strategy = deepspeed.strategy(self.deepspeed_plugin, group_options)
            strategy.set_training_options(accumulate_grad_batches=self.gradient_state.num_steps)
        else:
            strategy = settings.strategy(self.fsdp_plugin, settings.ddp_options(self.ddp_handler), group_options)
        runtime = Runtime(accelerator="cpu" if cpu or settings.flag(KEYS["use_cpu"].variable) else "auto",
                          strategy=strategy, precision=mixed_precisions()[self._mixed_precision],
                          compile=settings.compile_options(dynamo_backend, self.dynamo_plugin))
        if self.scaler_handler is not None and self._mixed_precision == "fp16":
            runtime.precision.scaler = torch.amp.GradScaler(runtime.device.type, **self.scaler_handler.to_kwargs())
        runtime.setup_environment()
        return runtime

    # -- settings ---
    @property
    def state(self) -> AcceleratorState:
        """This Accelerator's settings and processes, as Accelerate's ``AcceleratorState``."""
        return AcceleratorState(_accelerator=self)

    @property
    def mixed_precision(self) -> str:
        """``"no"``, ``"fp16"``, ``"bf16"`` or a name ``register_precision`` added."""
        return self._mixed_precision

    @property
    def native_amp(self) -> bool:
        """Whether forward passes run under torch's autocast (not under DeepSpeed, whose engine keeps 16-bit
        weights)."""
        return self._mixed_precision != "no" and self.deepspeed_plugin is None

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The fp16 loss scaler, or None."""
        return getattr(self._runtime.precision, "scaler", None)

    @property
    def split_batches(self) -> bool:
        """False: each process takes whole batches."""
        return False

    @property
    def even_batches(self) -> bool:
        """Whether prepared dataloaders give every process as many batches."""
        return self.dataloader_config.even_batches

    @property
    def gradient_accumulation_steps(self) -> int:
        """Batches per optimizer step."""
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        self.gradient_state.num_steps = steps

    @property
    def sync_gradients(self) -> bool:
        """Whether this batch ends an accumulation window: gradients are all-reduced and the optimizer steps."""
        return self.gradient_state.sync_gradients

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """Whether an optimizer skipped its last step for inf/nan gradients (fp16)."""
        return any(optimizer.step_was_skipped for optimizer in self._optimizers)

    @property
    def project_dir(self) -> str | None:
        """The project folder (``save_state`` with automatic naming, trackers)."""
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        """The trackers' folder (the project folder unless set)."""
        return self.project_configuration.logging_dir

    @property
    def save_iteration(self) -> int:
        """The number the next automatically named ``save_state`` folder takes."""
        return self.project_configuration.iteration

    # -- the step ---
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward()`` through the strategy and precision (fp16: scaled), divided by
        ``gradient_accumulation_steps`` so accumulated gradients are the window's mean.

        :param loss: the loss (keyword arguments go on to ``backward``).
        """
        if self.deepspeed_plugin is not None:
            deepspeed.backward(self, loss, **kwargs)  # and, where the window ends, the engine's step
            return
        steps = self.gradient_state.num_steps
        self._runtime.backward(loss / steps if steps > 1 else loss, **kwargs)

    def autocast(self, autocast_handler: AutocastKwargs | None = None) -> contextlib.AbstractContextManager:
        """The mixed-precision context for computation outside the prepared model's forward (a loss, say).

        :param autocast_handler: an ``AutocastKwargs``; ``enabled=False`` gives a context that does nothing.
            ``None`` (the default): the one in ``kwargs_handlers``, if any.
        """
        handler = autocast_handler or self.autocast_handler
        if handler is not None and not handler.enabled:
            return contextlib.nullcontext()
        return self._runtime.autocast()

    def profile(self, profile_handler: ProfileKwargs | None = None) -> contextlib.AbstractContextManager:
        """Profile the block with ``torch.profiler`` (the handler given, else ``kwargs_handlers``' ProfileKwargs);
        with its ``output_trace_dir`` each process writes its Chrome trace there as ``profile_<index>.json``.

        :param profile_handler: a ``ProfileKwargs``; ``None`` (the default): the one in ``kwargs_handlers``, else
            ``ProfileKwargs()``.
        """
        return profiling.profile(self, profile_handler or self.profile_handler or ProfileKwargs())

    def unscale_gradients(self, optimizer: Optimizer | list[Optimizer] | None = None) -> None:
        """Divide fp16 gradients by the loss scale (done by the clipping methods; nothing in other precisions).

        :param optimizer: a prepared optimizer or a list of them; ``None`` (the default): every prepared one.
        """
        if self.deepspeed_plugin is not None:
            return  # DeepSpeed's engine unscales inside its step
        chosen = self._optimizers if optimizer is None else optimizer if isinstance(optimizer, list) else [optimizer]
        for item in chosen:
            self._runtime.precision.unscale(original_optimizer(item))

    def clip_grad_norm_(self, parameters: Any, max_norm: float, norm_type: float = 2.0) -> torch.Tensor | float | None:
        """Clip the gradients of ``parameters`` to total norm ``max_norm`` (over every process's shard under FSDP);
        returns the norm they had. Under DeepSpeed the engine clips inside its step, to the config's
        ``gradient_clipping``: this returns the norm its last step saw, a float, or None before its first step (a
        ``max_norm`` that differs is said once).

        :param parameters: a tensor or an iterable of them (``model.parameters()``).
        :param max_norm: the total norm to clip to.
        :param norm_type: the p of the p-norm; default 2.0.
        """
        if self.deepspeed_plugin is not None:
            return deepspeed.clipped_norm(self, max_norm, norm_type)
        self.unscale_gradients()
        parameters = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        grads = [parameter.grad for parameter in parameters if parameter.grad is not None]
        total = whole(torch.nn.utils.get_total_norm(grads, norm_type)) if grads else torch.tensor(0.0)
        torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total)
        return total

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        """Clamp each gradient of ``parameters`` to ``[-clip_value, clip_value]`` (after unscaling).

        :param parameters: a tensor or an iterable of them (``model.parameters()``).
        :param clip_value: the largest absolute value a gradient keeps.
        :raises MisconfigurationError: under DeepSpeed, whose engine clips by norm only.
        """
        if self.deepspeed_plugin is not None:
            raise MisconfigurationError("accelerator.clip_grad_value_() under DeepSpeed: its engine clips by norm "
                                        "only, to the config's gradient_clipping.")
        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    # -- models and memory ---
    def unwrap_model(self, model: nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
                     ) -> nn.Module:
        """The module given to ``prepare`` (inside a ``torch.compile`` wrapper unless ``keep_torch_compile``).

        :param model: a prepared model (or any module).
        :param keep_fp32_wrapper: accepted for Accelerate's sake; no effect: the module returned has no autocast.
        :param keep_torch_compile: ``False``: the module inside a ``torch.compile`` wrapper; default ``True``.
        """
        module = original_module(model)
        if not keep_torch_compile and hasattr(module, "_orig_mod"):
            return module._orig_mod
        return module

    def free_memory(self, *objects: Any) -> list[None]:
        """Forget the prepared objects and release cached memory; returns a None for each object given, to
        assign back (``model, optimizer = accelerator.free_memory(model, optimizer)``)."""
        self._models.clear()
        self._parameter_names.clear()
        self._optimizers.clear()
        self._schedulers.clear()
        self._dataloaders.clear()
        self.step = 0
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return [None] * len(objects)

    clear = free_memory

    def verify_device_map(self, model: nn.Module) -> bool:
        """Whether ``model`` was loaded split over several devices (a Transformers ``hf_device_map``).

        :param model: the model to look into.
        """
        for module in model.modules():
            device_map = getattr(module, "hf_device_map", None)
            if device_map is not None and len(device_map) > 1:
                return True
        return False

    def maybe_context_parallel(self, buffers: Any = None, buffer_seq_dims: Any = None,
                               no_restore_buffers: Any = None) -> contextlib.AbstractContextManager:
        """The block as it is: context parallelism is not configured (the framework has no ParallelismConfig).

        :param buffers: not used.
        :param buffer_seq_dims: not used.
        :param no_restore_buffers: not used.
        """
        return contextlib.nullcontext()

    def lomo_backward(self, loss: torch.Tensor, learning_rate: float) -> None:
        """Refused: the LOMO optimizers' fused backward is not supported; use ``backward`` and a torch optimizer.

        :param loss: not used.
        :param learning_rate: not used.
        :raises MisconfigurationError: always: the framework does not wrap the LOMO optimizers.
        """
        raise MisconfigurationError("Accelerator.lomo_backward() is not supported: the framework does not wrap the "
                                    "LOMO optimizers; use accelerator.backward(loss) with a torch optimizer.")

    def deepspeed_ulysses_dl_adapter(self, dl: Any, model: nn.Module) -> Any:
        """Refused: DeepSpeed's Ulysses sequence parallelism is not run by the framework.

        :param dl: not used.
        :param model: not used.
        :raises MisconfigurationError: always: the framework does not run DeepSpeed's Ulysses sequence parallelism.
        """
        raise MisconfigurationError("Accelerator.deepspeed_ulysses_dl_adapter() is not supported: the framework does "
                                    "not run DeepSpeed's Ulysses sequence parallelism; prepare() the loader alone.")

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        """An iterable over ``dataloader``'s current pass from batch ``num_batches`` (resuming inside an epoch);
        a prepared loader does not load the skipped batches, another iterable drops them as it goes.

        :param dataloader: a prepared dataloader (or any iterable).
        :param num_batches: how many batches of the pass to skip; default 0.
        """
        return skip_first_batches(dataloader, num_batches)

    def __repr__(self) -> str:
        return (f"Accelerator(device={self.device}, num_processes={self.num_processes}, "
                f"mixed_precision={self.mixed_precision!r}, distributed_type={self.distributed_type.value})")
