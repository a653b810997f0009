"""Accelerate's enumerations, with its member names and values, so scripts can compare against them
(``accelerator.distributed_type == DistributedType.XLA`` is simply False here)."""

from __future__ import annotations

import enum


class AccelerateEnum(str, enum.Enum):
    """A string enumeration whose members print as their values, as most of Accelerate's do (``DistributedType``,
    ``ComputeEnvironment`` and ``SageMakerDistributedType`` print as ``Class.MEMBER``, as theirs do)."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def list(cls) -> list[str]:
        """Every member's value."""
        return [member.value for member in cls]


class DistributedType(str, enum.Enum):
    """How the processes of a run share the work (``accelerator.distributed_type``). The framework runs ``NO``,
    ``MULTI_CPU``, ``MULTI_GPU`` and ``FSDP``; the other members exist so that scripts can compare against them."""

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"
    XLA = "XLA"
    MEGATRON_LM = "MEGATRON_LM"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"


class ComputeEnvironment(str, enum.Enum):
    """Where a run is set up (``compute_environment`` in a config file)."""

    LOCAL_MACHINE = "LOCAL_MACHINE"
    AMAZON_SAGEMAKER = "AMAZON_SAGEMAKER"


class DynamoBackend(AccelerateEnum):
    """``torch.compile`` backends by Accelerate's names (``Accelerator(dynamo_backend=...)``)."""

    NO = "NO"
    EAGER = "EAGER"
    AOT_EAGER = "AOT_EAGER"
    INDUCTOR = "INDUCTOR"
    AOT_TS_NVFUSER = "AOT_TS_NVFUSER"
    NVPRIMS_NVFUSER = "NVPRIMS_NVFUSER"
    CUDAGRAPHS = "CUDAGRAPHS"
    OFI = "OFI"
    FX2TRT = "FX2TRT"
    ONNXRT = "ONNXRT"
    TENSORRT = "TENSORRT"
    AOT_TORCHXLA_TRACE_ONCE = "AOT_TORCHXLA_TRACE_ONCE"
    TORCHXLA_TRACE_ONCE = "TORCHXLA_TRACE_ONCE"
    TVM = "TVM"
    HPU_BACKEND = "HPU_BACKEND"
    NEURON = "NEURON"


class LoggerType(AccelerateEnum):
    """Tracker names for ``Accelerator(log_with=...)``; the framework runs ``tensorboard``, ``wandb`` and
    ``mlflow`` (and ``all`` of those installed)."""

    ALL = "all"
    AIM = "aim"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"
    TRACKIO = "trackio"
    COMETML = "comet_ml"
    MLFLOW = "mlflow"
    CLEARML = "clearml"
    DVCLIVE = "dvclive"
    SWANLAB = "swanlab"


class PrecisionType(AccelerateEnum):
    """``mixed_precision`` values; the framework runs ``no``, ``fp16`` and ``bf16``."""

    NO = "no"
    FP8 = "fp8"
    FP16 = "fp16"
    BF16 = "bf16"


class RNGType(AccelerateEnum):
    """Random generators ``synchronize_rng_state`` can make equal on every process."""

    TORCH = "torch"
    CUDA = "cuda"
    MLU = "mlu"
    SDAA = "sdaa"
    MUSA = "musa"
    NPU = "npu"
    XLA = "xla"
    XPU = "xpu"
    HPU = "hpu"
    NEURON = "neuron"
    GENERATOR = "generator"


class SageMakerDistributedType(str, enum.Enum):
    """SageMaker's kinds of distribution (config files written for SageMaker)."""

    NO = "NO"
    DATA_PARALLEL = "DATA_PARALLEL"
    MODEL_PARALLEL = "MODEL_PARALLEL"


class DDPCommunicationHookType(AccelerateEnum):
    """Gradient communication hooks for DDP (``DistributedDataParallelKwargs(comm_hook=..., comm_wrapper=...)``):
    compress to fp16 or bf16, or PowerSGD's low-rank approximation."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"
