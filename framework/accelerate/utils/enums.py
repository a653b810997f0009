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
    ``MULTI_CPU``, ``MULTI_GPU``, ``FSDP`` and ``DEEPSPEED``; the other members exist so that scripts can compare
    against them."""

    #: One process: nothing is distributed.
    NO = "NO"
    #: Several CPU processes with DistributedDataParallel.
    MULTI_CPU = "MULTI_CPU"
    #: Several processes with DistributedDataParallel, one per GPU.
    MULTI_GPU = "MULTI_GPU"
    #: Several Ascend NPU processes in Accelerate; not run here.
    MULTI_NPU = "MULTI_NPU"
    #: Several Cambricon MLU processes in Accelerate; not run here.
    MULTI_MLU = "MULTI_MLU"
    #: Several SDAA processes in Accelerate; not run here.
    MULTI_SDAA = "MULTI_SDAA"
    #: Several Moore Threads MUSA processes in Accelerate; not run here.
    MULTI_MUSA = "MULTI_MUSA"
    #: Several Intel XPU processes in Accelerate; not run here.
    MULTI_XPU = "MULTI_XPU"
    #: DeepSpeed's engine (``Accelerator(deepspeed_plugin=...)`` or ``--use_deepspeed``).
    DEEPSPEED = "DEEPSPEED"
    #: Fully sharded data parallelism (``fsdp_plugin=...`` or ``--use_fsdp``), run on FSDP2.
    FSDP = "FSDP"
    #: TPUs and other XLA devices in Accelerate; not run here.
    XLA = "XLA"
    #: Megatron-LM's tensor and pipeline parallelism in Accelerate; not run here.
    MEGATRON_LM = "MEGATRON_LM"
    #: Several Intel Gaudi (HPU) processes in Accelerate; not run here.
    MULTI_HPU = "MULTI_HPU"
    #: Several AWS Neuron (Trainium, Inferentia) processes in Accelerate; not run here.
    MULTI_NEURON = "MULTI_NEURON"


class ComputeEnvironment(str, enum.Enum):
    """Where a run is set up (``compute_environment`` in a config file)."""

    #: Machines the launcher starts the processes on itself (``framework launch``).
    LOCAL_MACHINE = "LOCAL_MACHINE"
    #: An Amazon SageMaker job; the framework's launcher refuses it.
    AMAZON_SAGEMAKER = "AMAZON_SAGEMAKER"


class DynamoBackend(AccelerateEnum):
    """``torch.compile`` backends by Accelerate's names (``Accelerator(dynamo_backend=...)``)."""

    #: Not compiled.
    NO = "NO"
    #: ``"eager"``: Dynamo captures the graphs and runs them as they are (for debugging the capture).
    EAGER = "EAGER"
    #: ``"aot_eager"``: AOTAutograd traces forward and backward, run without compiling (debugging).
    AOT_EAGER = "AOT_EAGER"
    #: ``"inductor"``: TorchInductor, torch's default compiler (Triton kernels on GPU, C++ on CPU).
    INDUCTOR = "INDUCTOR"
    #: ``"aot_ts_nvfuser"``: nvFuser through TorchScript; recent torch does not register it.
    AOT_TS_NVFUSER = "AOT_TS_NVFUSER"
    #: ``"nvprims_nvfuser"``: nvFuser through nvprims; recent torch does not register it.
    NVPRIMS_NVFUSER = "NVPRIMS_NVFUSER"
    #: ``"cudagraphs"``: replays the graphs as CUDA graphs, which saves kernel launch time.
    CUDAGRAPHS = "CUDAGRAPHS"
    #: ``"ofi"``: TorchScript's ``optimize_for_inference``; recent torch does not register it.
    OFI = "OFI"
    #: ``"fx2trt"``: Torch-TensorRT's FX path; recent torch does not register it.
    FX2TRT = "FX2TRT"
    #: ``"onnxrt"``: ONNX Runtime; recent torch does not register it.
    ONNXRT = "ONNXRT"
    #: ``"tensorrt"``: TensorRT, registered by the ``torch_tensorrt`` package.
    TENSORRT = "TENSORRT"
    #: ``"aot_torchxla_trace_once"``: an old torch_xla backend (now ``"openxla"``); recent torch does not register it.
    AOT_TORCHXLA_TRACE_ONCE = "AOT_TORCHXLA_TRACE_ONCE"
    #: ``"torchxla_trace_once"``: an old torch_xla inference backend; recent torch does not register it.
    TORCHXLA_TRACE_ONCE = "TORCHXLA_TRACE_ONCE"
    #: ``"tvm"``: Apache TVM (needs the ``tvm`` package).
    TVM = "TVM"
    #: ``"hpu_backend"``: Intel Gaudi's compiler (needs Gaudi's PyTorch package).
    HPU_BACKEND = "HPU_BACKEND"
    #: ``"neuron"``: AWS Neuron's compiler (needs the Neuron SDK's PyTorch package).
    NEURON = "NEURON"


class LoggerType(AccelerateEnum):
    """Tracker names for ``Accelerator(log_with=...)``; the framework runs ``tensorboard``, ``wandb`` and
    ``mlflow`` (and ``all`` of those installed)."""

    #: Every tracker below that the framework runs and whose package is installed.
    ALL = "all"
    #: Aim in Accelerate; refused here.
    AIM = "aim"
    #: TensorBoard event files in ``logging_dir/<project name>``.
    TENSORBOARD = "tensorboard"
    #: A Weights & Biases run in the project named at ``init_trackers``.
    WANDB = "wandb"
    #: Trackio in Accelerate; refused here.
    TRACKIO = "trackio"
    #: Comet ML in Accelerate; refused here.
    COMETML = "comet_ml"
    #: An MLflow run in the experiment named at ``init_trackers`` (stored under ``logging_dir/mlruns``).
    MLFLOW = "mlflow"
    #: ClearML in Accelerate; refused here.
    CLEARML = "clearml"
    #: DVCLive in Accelerate; refused here.
    DVCLIVE = "dvclive"
    #: SwanLab in Accelerate; refused here.
    SWANLAB = "swanlab"


class PrecisionType(AccelerateEnum):
    """``mixed_precision`` values; the framework runs ``no``, ``fp16`` and ``bf16``."""

    #: Full precision (fp32): no autocast.
    NO = "no"
    #: fp8 in Accelerate (Transformer Engine, MS-AMP, torchao); refused here.
    FP8 = "fp8"
    #: Autocast to float16, with a loss scaler against gradient underflow.
    FP16 = "fp16"
    #: Autocast to bfloat16 (no loss scaling needed).
    BF16 = "bf16"


class RNGType(AccelerateEnum):
    """Random generators ``synchronize_rng_state`` can make equal on every process."""

    #: torch's CPU generator.
    TORCH = "torch"
    #: The current CUDA device's generator (left alone while CUDA is not initialised).
    CUDA = "cuda"
    #: A Cambricon MLU's generator in Accelerate; refused here.
    MLU = "mlu"
    #: An SDAA device's generator in Accelerate; refused here.
    SDAA = "sdaa"
    #: A Moore Threads MUSA device's generator in Accelerate; refused here.
    MUSA = "musa"
    #: An Ascend NPU's generator in Accelerate; refused here.
    NPU = "npu"
    #: The XLA device's generator in Accelerate; refused here.
    XLA = "xla"
    #: An Intel XPU's generator in Accelerate; refused here.
    XPU = "xpu"
    #: An Intel Gaudi (HPU) device's generator in Accelerate; refused here.
    HPU = "hpu"
    #: An AWS Neuron device's generator in Accelerate; refused here.
    NEURON = "neuron"
    #: The ``torch.Generator`` passed as ``generator=``.
    GENERATOR = "generator"


class SageMakerDistributedType(str, enum.Enum):
    """SageMaker's kinds of distribution (config files written for SageMaker)."""

    #: A SageMaker job without distribution.
    NO = "NO"
    #: SageMaker's data-parallel library.
    DATA_PARALLEL = "DATA_PARALLEL"
    #: SageMaker's model-parallel library.
    MODEL_PARALLEL = "MODEL_PARALLEL"


class DDPCommunicationHookType(AccelerateEnum):
    """Gradient communication hooks for DDP (``DistributedDataParallelKwargs(comm_hook=..., comm_wrapper=...)``):
    compress to fp16 or bf16, or PowerSGD's low-rank approximation."""

    #: No hook: DDP's plain all-reduce of the gradients.
    NO = "no"
    #: Gradients cast to float16 for the all-reduce (half the traffic); as a wrapper, PowerSGD talks in fp16.
    FP16 = "fp16"
    #: Gradients cast to bfloat16 for the all-reduce; as a wrapper, PowerSGD talks in bf16.
    BF16 = "bf16"
    #: PowerSGD: each gradient sent as a low-rank approximation, its error carried to the next step.
    POWER_SGD = "power_sgd"
    #: PowerSGD over all of a bucket's gradients as one square matrix: faster than ``POWER_SGD``, mostly much
    #: less accurate.
    BATCHED_POWER_SGD = "batched_power_sgd"
