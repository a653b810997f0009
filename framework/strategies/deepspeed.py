"""DeepSpeed itself (the ``deepspeed`` extra): Lightning's ``DeepSpeedStrategy`` on DeepSpeed's engine.

The engine takes over what our precision and optimizer step do elsewhere: it keeps fp16/bf16 weights with fp32
master copies (its config's ``fp16``/``bf16`` blocks, from ``precision=``), scales the fp16 loss, partitions the
optimizer state (ZeRO stage 1), the gradients (2) and the parameters (3), offloads them, and clips the gradients
(``gradient_clipping``, from ``gradient_clip_val``). The Trainer's loop still decides when the optimizer steps
(it tells the engine which micro-batches end an accumulation window) and scales the loss for accumulation once.
Checkpoints are DeepSpeed's directories, with the run's own state beside them (``framework.io.deepspeed_dir``).

Example::

    Trainer(accelerator="cpu", devices=2, strategy="deepspeed_stage_2", precision="bf16-mixed")
    Trainer(devices=4, strategy=DeepSpeedStrategy(stage=3, offload_optimizer=True))
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer

from framework.errors import MisconfigurationError, describe
from framework.io.checkpoint_io import CheckpointIO
from framework.precision.base import Precision
from framework.precision.deepspeed import DeepSpeedPrecision
from framework.strategies.deepspeed_config import (
    PRECISION_BLOCKS,
    RunSettings,
    check_config,
    completed_config,
    dtype_name,
    lightning_config,
    read_config,
)
from framework.strategies.deepspeed_groups import LetsGoOfGroups
from framework.strategies.deepspeed_saving import DeepSpeedSaving
from framework.strategies.parallel import ParallelStrategy, StepRouter, start_process_group

EXTRA_HINT = 'pip install "framework[deepspeed]"'


def deepspeed_available() -> bool:
    """Whether DeepSpeed can be imported (without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec("deepspeed") is not None
    except (ImportError, ValueError):
        return False


class DeepSpeedStrategy(DeepSpeedSaving, LetsGoOfGroups, ParallelStrategy):
    """DeepSpeed's ZeRO engine, with Lightning's ``DeepSpeedStrategy`` arguments (same names and defaults).

    The ZeRO and offload arguments build DeepSpeed's ``zero_optimization`` block; DeepSpeed's configuration
    reference describes each at length.

    :param accelerator: not taken here: give ``Trainer(accelerator=...)`` (an error names it).
    :param zero_optimization: build a ``zero_optimization`` block at all (``False``: plain data parallel).
    :param stage: the ZeRO stage: 0 (none), 1 (optimizer state split), 2 (and gradients, the default), 3 (and
        parameters).
    :param remote_device: accepted as in Lightning; unused (parameters are made where the module makes them).
    :param offload_optimizer: keep the optimizer state (and step it) on ``offload_optimizer_device``.
    :param offload_parameters: under stage 3, keep the parameters on ``offload_params_device``.
    :param offload_params_device: ``"cpu"`` or ``"nvme"`` (which needs ``nvme_path``).
    :param nvme_path: an existing directory for NVMe offload.
    :param params_buffer_count: parameter buffers for NVMe offload.
    :param params_buffer_size: the size of each parameter buffer, in elements.
    :param max_in_cpu: elements kept in CPU memory when parameters go to NVMe.
    :param offload_optimizer_device: ``"cpu"`` or ``"nvme"`` (which needs ``nvme_path``).
    :param optimizer_buffer_count: optimizer-state buffers for NVMe offload.
    :param block_size: the asynchronous I/O block size, in bytes.
    :param queue_depth: the asynchronous I/O queue depth.
    :param single_submit: submit I/O requests one at a time.
    :param overlap_events: overlap I/O submission with completion.
    :param thread_count: I/O threads.
    :param pin_memory: pin the CPU copies of offloaded state.
    :param sub_group_size: elements per optimizer step group under stage 3.
    :param contiguous_gradients: copy gradients into one buffer as they are made.
    :param overlap_comm: overlap the gradient reduction with the backward pass.
    :param allgather_partitions: gather parameters with one all-gather (else broadcasts).
    :param reduce_scatter: reduce gradients with reduce-scatter (else all-reduce).
    :param allgather_bucket_size: elements gathered at once.
    :param reduce_bucket_size: elements reduced at once.
    :param zero_allow_untested_optimizer: let ZeRO wrap an optimizer DeepSpeed has not tested (any torch one).
    :param logging_batch_size_per_gpu: DeepSpeed's ``train_micro_batch_size_per_gpu`` (only its throughput
        logging uses it); ``"auto"``: 1.
    :param config: a DeepSpeed config (a dict or a JSON file's path; or the file ``PL_DEEPSPEED_CONFIG_PATH``
        names). It replaces what the arguments above would build; the run still fills in precision, gradient
        accumulation, clipping and batch size where it leaves them out or ``"auto"``, and a value set in both
        that differs is an error naming both.
    :param logging_level: DeepSpeed's logger level (default ``logging.WARN``).
    :param parallel_devices: not taken here: give ``Trainer(devices=...)``.
    :param cluster_environment: not taken here: give ``Trainer(plugins=[...])``.
    :param loss_scale: fp16's loss scale; 0 (default): dynamic, with the four settings below.
    :param initial_scale_power: the dynamic scale starts at 2 to this power.
    :param loss_scale_window: steps without overflow before the scale grows.
    :param hysteresis: overflows tolerated before the scale shrinks.
    :param min_loss_scale: the smallest scale.
    :param partition_activations: split checkpointed activations across ranks.
    :param cpu_checkpointing: keep checkpointed activations on the CPU.
    :param contiguous_memory_optimization: copy checkpointed activations into one buffer.
    :param synchronize_checkpoint_boundary: synchronise at each activation-checkpoint boundary.
    :param load_full_weights: accepted as in Lightning; a one-file checkpoint is always loaded as whole weights.
    :param precision_plugin: not taken here: give ``Trainer(precision=...)``.
    :param process_group_backend: the ``torch.distributed`` backend (default: ``nccl`` on GPUs, ``gloo`` on CPU).
    :param timeout: how long a collective may wait, as in ``DDPStrategy``.
    :param start_method: how ranks no launcher started are started, as in ``DDPStrategy``.
    :param exclude_frozen_parameters: leave parameters that do not train out of checkpoints.
    :param checkpoint_io: reads one-file checkpoints (whole weights) and removes old checkpoints; DeepSpeed
        writes and reads its directories itself.
    :raises MisconfigurationError: where DeepSpeed is not installed, ``accelerator``, ``parallel_devices``,
        ``cluster_environment`` or ``precision_plugin`` is given, or ``config`` cannot be read or is not a valid config.
    """

    name = "deepspeed"

    def __init__(
        self, accelerator: Any = None, zero_optimization: bool = True, stage: int = 2,
        remote_device: str | None = None, offload_optimizer: bool = False, offload_parameters: bool = False,
        offload_params_device: str = "cpu", nvme_path: str = "/local_nvme", params_buffer_count: int = 5,
        params_buffer_size: int = 100_000_000, max_in_cpu: int = 1_000_000_000, offload_optimizer_device: str = "cpu",
        optimizer_buffer_count: int = 4, block_size: int = 1048576, queue_depth: int = 8, single_submit: bool = False,
        overlap_events: bool = True, thread_count: int = 1, pin_memory: bool = False,
        sub_group_size: int = 1_000_000_000_000, contiguous_gradients: bool = True, overlap_comm: bool = True,
        allgather_partitions: bool = True, reduce_scatter: bool = True, allgather_bucket_size: int = 200_000_000,
        reduce_bucket_size: int = 200_000_000, zero_allow_untested_optimizer: bool = True,
        logging_batch_size_per_gpu: str | int = "auto", config: str | os.PathLike | dict[str, Any] | None = None,
        logging_level: int = logging.WARN, parallel_devices: Any = None, cluster_environment: Any = None,
        loss_scale: float = 0, initial_scale_power: int = 16, loss_scale_window: int = 1000, hysteresis: int = 2,
        min_loss_scale: int = 1, partition_activations: bool = False, cpu_checkpointing: bool = False,
        contiguous_memory_optimization: bool = False, synchronize_checkpoint_boundary: bool = False,
        load_full_weights: bool = False, precision_plugin: Any = None, process_group_backend: str | None = None,
        timeout: timedelta | float | None = None, start_method: str = "auto", exclude_frozen_parameters: bool = False,
        checkpoint_io: CheckpointIO | None = None,
    ) -> None:
        if not deepspeed_available():
            raise MisconfigurationError(f"DeepSpeedStrategy needs DeepSpeed, which is not installed: {EXTRA_HINT}. "
                                        "Without it, strategy='zero2' / 'zero3' run ZeRO on PyTorch's FSDP2.")
        super().__init__(start_method, timeout, process_group_backend, checkpoint_io)
        for name, value, instead in (("accelerator", accelerator, "Trainer(accelerator=...)"),
                                     ("parallel_devices", parallel_devices, "Trainer(devices=...)"),
                                     ("cluster_environment", cluster_environment, "Trainer(plugins=[...])"),
                                     ("precision_plugin", precision_plugin, "Trainer(precision=...)")):
            if value is not None:
                raise MisconfigurationError(f"DeepSpeedStrategy({name}={describe(value)}): give it as {instead}.")
        given = read_config(config)
        self.config = given if given is not None else lightning_config(
            zero_optimization, stage, offload_optimizer, offload_parameters, offload_params_device, nvme_path,
            params_buffer_count, params_buffer_size, max_in_cpu, offload_optimizer_device, optimizer_buffer_count,
            block_size, queue_depth, single_submit, overlap_events, thread_count, pin_memory,
            zero_allow_untested_optimizer, logging_batch_size_per_gpu, partition_activations, cpu_checkpointing,
            contiguous_memory_optimization, synchronize_checkpoint_boundary, sub_group_size=sub_group_size,
            contiguous_gradients=contiguous_gradients, overlap_comm=overlap_comm,
            allgather_partitions=allgather_partitions, reduce_scatter=reduce_scatter,
            allgather_bucket_size=allgather_bucket_size, reduce_bucket_size=reduce_bucket_size)
        check_config(self.config, "DeepSpeedStrategy(config=...)" if given is not None else "DeepSpeedStrategy")
        self.loss_scale_options = {"loss_scale": loss_scale, "initial_scale_power": initial_scale_power,
                                   "loss_scale_window": loss_scale_window, "hysteresis": hysteresis,
                                   "min_loss_scale": min_loss_scale}
        self.logging_level = logging_level
        self.remote_device = remote_device
        self.load_full_weights = load_full_weights
        self.exclude_frozen_parameters = exclude_frozen_parameters
        self.run_settings = RunSettings()
        self.engine: Any = None  # DeepSpeed's engine, once made
        self._trains = False  # the engine has an optimizer
        self._router: StepRouter | None = None
        self._pending: tuple[str, bool] | None = None  # a checkpoint to read once the engine exists, strictly?
        self._gathered_for_evaluation = False

    @property
    def zero_stage(self) -> int:
        """The ZeRO stage the config asks for."""
        return int((self.config.get("zero_optimization") or {}).get("stage", 0))

    @property
    def deepspeed_engine(self) -> Any:
        """DeepSpeed's engine (Lightning's name), once the module and its optimizer are set up."""
        return self.engine

    # -- what the run decides ---
    def precision_for(self, precision: Precision) -> Precision:
        """DeepSpeed's own mode for the precision asked for (``DeepSpeedPrecision``).

        :raises MisconfigurationError: where ``precision`` is not one DeepSpeed runs (such as "64-true").
        """
        if isinstance(precision, DeepSpeedPrecision):
            return precision
        if precision.name not in PRECISION_BLOCKS:
            raise MisconfigurationError(
                f"precision={precision.name!r} does not run under DeepSpeed. Accepted: '32-true', '16-mixed', "
                "'bf16-mixed', '16-true', 'bf16-true'.")
        return DeepSpeedPrecision(precision.name, PRECISION_BLOCKS[precision.name] or dtype_name(self.config))

    def set_training_options(self, accumulate_grad_batches: int = 1, gradient_clip_val: float | None = None,
                             gradient_clip_algorithm: str | None = None, micro_batch_size: int | None = None) -> None:
        """The loop's accumulation and clipping, which go into DeepSpeed's config (DeepSpeed clips by norm only).

        :raises MisconfigurationError: where clipping is asked by another algorithm than "norm".
        """
        if gradient_clip_val and gradient_clip_algorithm not in (None, "norm"):
            raise MisconfigurationError(
                f"gradient_clip_algorithm={gradient_clip_algorithm!r}: DeepSpeed clips gradients by norm only. Use "
                "gradient_clip_algorithm='norm'.")
        self.run_settings = dataclasses.replace(self.run_settings, accumulate=accumulate_grad_batches,
                                                clip_norm=gradient_clip_val or None,
                                                micro_batch_size=micro_batch_size)

    # -- set-up ---
    def setup_environment(self) -> None:
        """The process group (one of its own on one process: DeepSpeed needs one), then DeepSpeed's view of it."""
        os.environ.setdefault("DS_ACCELERATOR", "cuda" if self.device.type == "cuda" else "cpu")
        import deepspeed  # before the group starts: imported after, its barrier's default argument held the group

        super().setup_environment()
        if not dist.is_initialized():
            start_process_group(self.backend, store=dist.HashStore(), rank=0, world_size=1)
            self._started_group = True
        deepspeed.utils.logging.logger.setLevel(self.logging_level)

    def setup_module(self, module: nn.Module) -> nn.Module:
        """``module`` on the device, inside the router DeepSpeed's engine will wrap once the optimizer comes."""
        self._router = EngineRouter(module.to(self.device))
        self.engine, self._trains = None, False
        return self._router

    def setup_optimizer(self, optimizer: Optimizer) -> Optimizer:
        """Make DeepSpeed's engine from the module and ``optimizer``; its ZeRO optimizer comes back.

        :raises MisconfigurationError: where an optimizer was set up already (one per model).
        """
        if self._trains:
            raise MisconfigurationError("DeepSpeed trains one optimizer per model; configure_optimizers returned more "
                                        "than one. Put the parameter groups in one optimizer.")
        self.start_engine(optimizer)
        return self.engine.optimizer

    def unwrap(self, module: nn.Module) -> nn.Module:
        """The user's module inside the router (and the engine)."""
        while isinstance(module, StepRouter) or type(module).__name__ == "DeepSpeedEngine":
            module = module.module
        return module

    def start_engine(self, optimizer: Optimizer | None = None, model_parameters: Any = None,
                     lr_scheduler: Any = None) -> Any:
        """Make DeepSpeed's engine around the set-up module: with ``optimizer``, or with ``model_parameters`` for
        the optimizer the config's ``optimizer`` block names (DeepSpeed builds it), or neither (evaluation only).
        ``lr_scheduler`` (a scheduler, or a callable taking the optimizer) is stepped by the engine's step.

        :raises MisconfigurationError: where the module is not set up yet.
        """
        import deepspeed

        router = self._router
        if router is None:
            raise MisconfigurationError("DeepSpeedStrategy: set the module up before its optimizer.")
        settings = dataclasses.replace(self.run_settings, world_size=self.world_size, precision=self.precision.name,
                                       loss_scale=self.loss_scale_options)
        config = completed_config(self.config, settings)
        trains = optimizer is not None or model_parameters is not None
        if not trains:  # evaluation only: no optimizer state, the rest as training would have it
            config = {key: value for key, value in config.items() if key not in ("optimizer", "scheduler")}
        self.precision.use(dtype_name(config))
        parameters = model_parameters if model_parameters is not None else None if optimizer is not None else []
        engine, *_ = deepspeed.initialize(model=router, optimizer=optimizer, config=config, dist_init_required=False,
                                          model_parameters=parameters, lr_scheduler=lr_scheduler)
        engine.set_gradient_accumulation_boundary(True)  # the loop says which micro-batches end a window
        self.engine, self._trains = engine, trains
        router.__dict__["engine"] = engine
        if self._pending is not None:
            self._load_pending()
        return engine

    # -- the step ---
    def step_function(self, model: nn.Module, name: str, synced: bool | None = None,
                      method: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """The user's ``name`` step run through the engine's forward (where ZeRO-3 gathers parameters); a
        training step that runs backward itself (manual optimization) runs beside it."""
        router = self._router
        step = method if method is not None else getattr(router.module, name)
        beside = name == "training_step" and synced is False

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.engine is None:
                self.start_engine(None)
            if beside or self._gathered_for_evaluation:
                return step(*args, **kwargs)
            router.__dict__["method"] = step
            try:
                return router(*args, **kwargs)
            finally:
                router.__dict__["method"] = router.module

        return call

    @contextlib.contextmanager
    def evaluating(self, model: nn.Module, every_rank_same_batches: bool) -> Iterator[None]:
        """Under ZeRO-3, where ranks run different numbers of evaluation batches, every parameter is gathered
        once for the whole evaluation and ZeRO-3's hooks are lifted (DeepSpeed's ``unwrap_model_for_generation``),
        and the steps run beside the engine: they then need no collective (the ranks' all-gathers would not pair
        up)."""
        if every_rank_same_batches or self.world_size == 1 or self.zero_stage != 3 or self.engine is None:
            yield
            return
        from deepspeed.runtime.zero.stage3 import unwrap_model_for_generation

        with unwrap_model_for_generation(self.engine):
            self._gathered_for_evaluation = True
            try:
                yield
            finally:
                self._gathered_for_evaluation = False

    @property
    def supports_inference_mode(self) -> bool:
        """False: ZeRO-3 writes gathered parameters in forward, which inference tensors forbid."""
        return False

    def no_backward_sync(self, module: nn.Module, enabled: bool = True) -> contextlib.AbstractContextManager:
        """Tell the engine the micro-batches inside do not end an accumulation window (it then neither reduces
        nor steps)."""
        if not enabled or self.engine is None:
            return contextlib.nullcontext()
        return _inside_window(self.engine)

    def backward(self, loss: torch.Tensor, module: nn.Module | None = None, *args: Any, **kwargs: Any) -> None:
        """The engine's backward (its fp16 loss scale; the loop already divided the loss for accumulation)."""
        self.engine.backward(loss, scale_wrt_gas=False, **kwargs)

    def optimizer_step(self, optimizer: Optimizer, closure: Any = None, **kwargs: Any) -> bool:
        """Run ``closure`` (training_step and backward), then the engine's step (clipping, the step, zeroing the
        gradients); False when fp16 found inf/nan and it skipped the step."""
        if closure is not None:
            closure()
        self.engine.step()
        return bool(self.engine.was_step_applied())

    def clip_gradients_norm(self, module: nn.Module, optimizer: Optimizer, max_norm: float, norm_type: float = 2.0,
                            error_if_nonfinite: bool = False) -> torch.Tensor:
        """Nothing here: the engine clips inside its step, to the config's ``gradient_clipping`` (which the
        Trainer's ``gradient_clip_val`` sets). Another norm than that one is an error.

        :raises MisconfigurationError: where ``max_norm`` is not the configured one, or ``norm_type`` is not 2.
        """
        configured = float(self.engine.gradient_clipping() or 0.0)
        if float(max_norm) != configured or norm_type != 2.0:
            raise MisconfigurationError(
                f"Clipping to norm {max_norm} (norm_type={norm_type}) under DeepSpeed: its engine clips inside its "
                f"step, by the 2-norm, to the config's gradient_clipping ({configured}). Set Trainer("
                "gradient_clip_val=...) or gradient_clipping in the DeepSpeed config instead of clipping yourself.")
        return torch.tensor(float("nan"))

    def clip_gradients_value(self, module: nn.Module, optimizer: Optimizer, clip_value: float) -> None:
        """Refused: DeepSpeed clips by norm only.

        :raises MisconfigurationError: always: DeepSpeed clips by norm only.
        """
        raise MisconfigurationError("DeepSpeed clips gradients by norm only; use gradient_clip_algorithm='norm'.")

    def teardown(self) -> None:
        """The end of one run: the engine stays for the next (``trainer.test`` after ``fit``)."""

    def __repr__(self) -> str:
        return f"DeepSpeedStrategy(device={self.device}, world_size={self.world_size}, stage={self.zero_stage})"


class EngineRouter(StepRouter):
    """The router DeepSpeed's engine wraps. Called from outside (a Runtime's or an Accelerator's model, a step
    method), it calls the engine, whose forward (ZeRO's bookkeeping, its backward hooks) calls it back; from
    inside, it runs the user's method. Before the engine exists it runs the method directly."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        engine = self.__dict__.get("engine")
        if engine is None or self.__dict__.get("entered"):
            return self.__dict__["method"](*args, **kwargs)
        self.__dict__["entered"] = True
        try:
            return engine(*args, **kwargs)
        finally:
            self.__dict__["entered"] = False


@contextlib.contextmanager
def _inside_window(engine: Any) -> Iterator[None]:
    engine.set_gradient_accumulation_boundary(False)
    try:
        yield
    finally:
        engine.set_gradient_accumulation_boundary(True)
