"""Hugging Face Accelerate's way of writing a training loop, on the framework's Runtime.

A loop written for Accelerate runs after ``from accelerate import Accelerator`` becomes
``from framework.accelerate import Accelerator`` (and ``accelerate.X`` becomes
``framework.accelerate.X`` for its other modules: ``utils``, ``state``, ``logging``, ``tracking``,
``data_loader``, ``local_sgd`` ...), launched with ``framework launch`` and Accelerate's flags or
config file, or with torchrun. Names of what the framework does not run (big-model
dispatch, pipeline inference) import too and refuse when used. Not imported by ``import framework``.
"""

from framework.accelerate.accelerator import Accelerator
from framework.accelerate.big_modeling import (
    cpu_offload,
    cpu_offload_with_hook,
    disk_offload,
    dispatch_model,
    init_empty_weights,
    init_on_device,
    load_checkpoint_and_dispatch,
)
from framework.accelerate.data_loader import skip_first_batches
from framework.accelerate.inference import prepare_pippy
from framework.accelerate.launchers import debug_launcher, notebook_launcher
from framework.accelerate.parallelism_config import ParallelismConfig
from framework.accelerate.state import AcceleratorState, GradientState, PartialState
from framework.accelerate.utils import (
    AutocastKwargs,
    DataLoaderConfiguration,
    DDPCommunicationHookType,
    DeepSpeedPlugin,
    DistributedDataParallelKwargs,
    DistributedType,
    FullyShardedDataParallelPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
    find_executable_batch_size,
    infer_auto_device_map,
    is_rich_available,
    load_checkpoint_in_model,
    synchronize_rng_states,
)

__all__ = [
    "Accelerator", "AcceleratorState", "AutocastKwargs", "DataLoaderConfiguration", "DDPCommunicationHookType",
    "DeepSpeedPlugin", "DistributedDataParallelKwargs", "DistributedType", "FullyShardedDataParallelPlugin",
    "GradScalerKwargs", "GradientState", "InitProcessGroupKwargs", "ParallelismConfig", "PartialState",
    "ProfileKwargs", "cpu_offload", "cpu_offload_with_hook", "debug_launcher", "disk_offload", "dispatch_model",
    "find_executable_batch_size", "infer_auto_device_map", "init_empty_weights", "init_on_device",
    "is_rich_available", "load_checkpoint_and_dispatch", "load_checkpoint_in_model", "notebook_launcher",
    "prepare_pippy", "skip_first_batches", "synchronize_rng_states",
]
