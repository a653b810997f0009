"""Accelerate's launch settings, one table: each config key, the values it accepts, the environment variable that
carries it from the launcher to every rank's ``Accelerator()``, and Accelerate's value where nothing gives it.

``framework launch`` and ``framework config`` check config files and flags against it and write the variables
through it (:mod:`framework.cli.launch_plan`); the Accelerator reads them back through it
(:mod:`framework.accelerate.settings`). The variables are those ``accelerate launch`` (1.15) sets, spelled as it
spells them.

Example::

    KEYS["fsdp_min_num_params"].variable   # 'FSDP_MIN_NUM_PARAMS'
    from_environment("fsdp_version")        # os.environ["FSDP_VERSION"], else 1
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from framework.accelerate.config_values import (
    MIXED_PRECISIONS,
    Check,
    boolean,
    choice,
    class_names,
    gpu_ids,
    number,
    reshard,
    sharding_strategy,
    text,
    whole,
)

DISTRIBUTED_TYPES = ("NO", "MULTI_CPU", "MULTI_GPU", "FSDP", "DEEPSPEED")
GPU_TYPES = ("MULTI_GPU", "FSDP", "DEEPSPEED")  # what asks for GPUs unless use_cpu says otherwise
WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
USE_FSDP = "ACCELERATE_USE_FSDP"  # set to "true" by the launcher for distributed_type FSDP
USE_DEEPSPEED = "ACCELERATE_USE_DEEPSPEED"  # and this one for distributed_type DEEPSPEED
_OTHER_DEVICES = " (this launcher starts CPU and CUDA ranks)"


@dataclass(frozen=True)
class Key:
    """One config key. ``variable`` carries it to the ranks (None: the launcher acts on it itself); ``default`` is
    Accelerate's value where neither the config nor the environment gives one; ``sent`` says whether the launcher
    writes that default when the key is not given (as ``accelerate launch`` does)."""

    name: str
    check: Check
    section: str = ""  # "", "fsdp_config", "dynamo_config", or "launch" (a flag of the launcher, no config key)
    variable: str | None = None
    default: Any = None
    sent: bool = True


_TABLE = (
    Key("compute_environment", choice("LOCAL_MACHINE", refused={
        "AMAZON_SAGEMAKER": " (SageMaker jobs are not launched from here)"})),
    Key("distributed_type", choice(*DISTRIBUTED_TYPES, refused={
        "MEGATRON_LM": " (Megatron-LM is not run here; tensor parallelism is "
                                          "framework.strategies.ModelParallelStrategy, on the Trainer)",
        "XLA": _OTHER_DEVICES, "TPU": _OTHER_DEVICES, "MULTI_XPU": _OTHER_DEVICES, "MULTI_NPU": _OTHER_DEVICES,
        "MULTI_MLU": _OTHER_DEVICES, "MULTI_SDAA": _OTHER_DEVICES, "MULTI_MUSA": _OTHER_DEVICES,
        "MULTI_HPU": _OTHER_DEVICES, "MULTI_NEURON": _OTHER_DEVICES})),
    Key("num_processes", whole(1, also=(-1,))),  # -1: Accelerate's "given on the command line"
    Key("num_machines", whole(1)),
    Key("machine_rank", whole(0)),
    Key("main_process_ip", text),
    Key("main_process_port", whole(0, 65535)),
    Key("mixed_precision", choice(*MIXED_PRECISIONS, lower=True, refused={"FP8": " (no FP8 training here)"}),
        variable="ACCELERATE_MIXED_PRECISION", default="no"),
    Key("use_cpu", boolean, variable="ACCELERATE_USE_CPU", default=False),
    Key("gpu_ids", gpu_ids, variable="CUDA_VISIBLE_DEVICES", default="all", sent=False),
    Key("rdzv_backend", choice("static", "c10d", lower=True)),  # checked, then unused: ranks meet at main_process_ip
    Key("fsdp_version", whole(1, 2), "fsdp_config", "FSDP_VERSION", 1),
    Key("fsdp_sharding_strategy", sharding_strategy, "fsdp_config", "FSDP_SHARDING_STRATEGY", "FULL_SHARD"),
    Key("fsdp_reshard_after_forward", reshard, "fsdp_config", "FSDP_RESHARD_AFTER_FORWARD", True),
    Key("fsdp_offload_params", boolean, "fsdp_config", "FSDP_OFFLOAD_PARAMS", False),
    Key("fsdp_min_num_params", whole(0), "fsdp_config", "FSDP_MIN_NUM_PARAMS", 100_000_000),
    Key("fsdp_auto_wrap_policy", choice(*WRAP_POLICIES), "fsdp_config", "FSDP_AUTO_WRAP_POLICY", sent=False),
    Key("fsdp_transformer_layer_cls_to_wrap", class_names, "fsdp_config", "FSDP_TRANSFORMER_CLS_TO_WRAP", sent=False),
    Key("fsdp_backward_prefetch", choice("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"), "fsdp_config",
        "FSDP_BACKWARD_PREFETCH", sent=False),
    Key("fsdp_state_dict_type", choice("SHARDED_STATE_DICT", "FULL_STATE_DICT", "LOCAL_STATE_DICT"), "fsdp_config",
        "FSDP_STATE_DICT_TYPE", "SHARDED_STATE_DICT", sent=False),
    Key("fsdp_forward_prefetch", boolean, "fsdp_config", "FSDP_FORWARD_PREFETCH", False),
    Key("fsdp_use_orig_params", boolean, "fsdp_config", "FSDP_USE_ORIG_PARAMS", True),
    Key("fsdp_cpu_ram_efficient_loading", boolean, "fsdp_config", "FSDP_CPU_RAM_EFFICIENT_LOADING", True),
    Key("fsdp_sync_module_states", boolean, "fsdp_config", "FSDP_SYNC_MODULE_STATES", True),
    Key("fsdp_activation_checkpointing", boolean, "fsdp_config", "FSDP_ACTIVATION_CHECKPOINTING", False),
    Key("fsdp_activation_checkpointing_offload", boolean, "fsdp_config", "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD",
        False),
    Key("dynamo_backend", choice("NO", "EAGER", "AOT_EAGER", "INDUCTOR", "AOT_TS_NVFUSER", "NVPRIMS_NVFUSER",
                                 "CUDAGRAPHS", "OFI", "FX2TRT", "ONNXRT", "TENSORRT", "TVM"),
        "dynamo_config", "ACCELERATE_DYNAMO_BACKEND", "NO"),
    Key("dynamo_mode", choice("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs", lower=True),
        "dynamo_config", "ACCELERATE_DYNAMO_MODE", "default"),
    Key("dynamo_use_fullgraph", boolean, "dynamo_config", "ACCELERATE_DYNAMO_USE_FULLGRAPH", False),
    Key("dynamo_use_dynamic", boolean, "dynamo_config", "ACCELERATE_DYNAMO_USE_DYNAMIC", False),
    Key("dynamo_use_regional_compilation", boolean, "dynamo_config", "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION",
        False),
    Key("deepspeed_config_file", text, "deepspeed_config", "ACCELERATE_DEEPSPEED_CONFIG_FILE", sent=False),
    Key("zero_stage", whole(0, 3), "deepspeed_config", "ACCELERATE_DEEPSPEED_ZERO_STAGE", sent=False),
    Key("offload_optimizer_device", choice("none", "cpu", "nvme", lower=True), "deepspeed_config",
        "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", sent=False),
    Key("offload_param_device", choice("none", "cpu", "nvme", lower=True), "deepspeed_config",
        "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", sent=False),
    Key("offload_optimizer_nvme_path", text, "deepspeed_config", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH",
        sent=False),
    Key("offload_param_nvme_path", text, "deepspeed_config", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH",
        sent=False),
    Key("gradient_clipping", number, "deepspeed_config", "ACCELERATE_GRADIENT_CLIPPING", sent=False),
    Key("zero3_init_flag", boolean, "deepspeed_config", "ACCELERATE_DEEPSPEED_ZERO3_INIT", sent=False),
    Key("zero3_save_16bit_model", boolean, "deepspeed_config", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL",
        sent=False),
    Key("deepspeed_moe_layer_cls_names", text, "deepspeed_config", "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES",
        sent=False),
    Key("deepspeed_multinode_launcher", choice("standard", lower=True, refused={
        name.upper(): " (ranks on several machines are started with torchrun here: 'standard')"
        for name in ("pdsh", "openmpi", "mvapich", "mpich", "nossh", "slurm")}), "deepspeed_config"),
    Key("gradient_accumulation_steps", whole(1), "launch", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", sent=False),
    Key("num_cpu_threads_per_process", whole(1), "launch", "OMP_NUM_THREADS", sent=False),
)
KEYS = {key.name: key for key in _TABLE}


def _section(name: str) -> dict[str, Check]:
    return {key.name: key.check for key in _TABLE if key.section == name}


TOP_LEVEL = _section("")
FSDP_KEYS = _section("fsdp_config")
# A deepspeed_config section names its keys without a prefix, and may give the accumulation steps too.
DEEPSPEED_KEYS = {**_section("deepspeed_config"),
                  "gradient_accumulation_steps": KEYS["gradient_accumulation_steps"].check}
DYNAMO_KEYS = _section("dynamo_config")
CHECKS = {key.name: key.check for key in _TABLE}


def from_environment(name: str, default: Any = ...) -> Any:
    """The launcher's value of the key ``name`` as its variable holds it (a string), else ``default`` (Accelerate's
    default when not given)."""
    key = KEYS[name]
    return os.environ.get(key.variable, key.default if default is ... else default)

