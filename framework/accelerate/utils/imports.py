"""Accelerate's ``is_*_available`` probes: whether a package is installed, and whether a kind of device is one
the framework can compute on (CPU, CUDA and Apple's MPS; never NPU, MLU, SDAA, MUSA, HPU, XPU, Neuron or XLA,
which it does not run)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import operator
import os
from collections.abc import Callable
from typing import Any

import torch

_COMPARISONS = {">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "<=": operator.le,
                "<": operator.lt}


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = "".join(character for character in piece if character.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def compare_versions(version: str, operation: str, requirement: str) -> bool:
    """Whether ``version`` compares to ``requirement`` as ``operation`` (``">="``, ``"<"`` ...) says.

    :raises ValueError: where ``operation`` is not a comparison (``"<"``, ``"<="``, ``"=="``, ``"!="``, ``">="``,
        ``">"``).
    """
    if operation not in _COMPARISONS:
        raise ValueError(f"compare_versions(operation={operation!r}): accepted {', '.join(_COMPARISONS)}.")
    return _COMPARISONS[operation](_version_tuple(version), _version_tuple(requirement))


def is_torch_version(operation: str, version: str) -> bool:
    """Whether the installed torch compares to ``version`` as ``operation`` says.

    Example::

        is_torch_version(">=", "2.4.0")
    """
    return compare_versions(torch.__version__, operation, version)


def _package_probe(name: str, module: str, minimum: str | None = None) -> Callable[..., bool]:
    def probe(min_version: str | None = None) -> bool:
        if importlib.util.find_spec(module) is None:
            return False
        wanted = min_version or minimum
        if wanted is None:
            return True
        try:
            return compare_versions(importlib.metadata.version(module), ">=", wanted)
        except importlib.metadata.PackageNotFoundError:
            return True

    probe.__name__ = probe.__qualname__ = name
    probe.__doc__ = f"Whether the ``{module}`` package is installed" + (f" (at least {minimum})." if minimum else ".")
    return probe


is_aim_available = _package_probe("is_aim_available", "aim")
is_amdsmi_available = _package_probe("is_amdsmi_available", "amdsmi")
is_bnb_available = _package_probe("is_bnb_available", "bitsandbytes")
is_4bit_bnb_available = _package_probe("is_4bit_bnb_available", "bitsandbytes", "0.39.0")
is_8bit_bnb_available = _package_probe("is_8bit_bnb_available", "bitsandbytes", "0.37.2")
is_boto3_available = _package_probe("is_boto3_available", "boto3")
is_clearml_available = _package_probe("is_clearml_available", "clearml")
is_comet_ml_available = _package_probe("is_comet_ml_available", "comet_ml")
is_datasets_available = _package_probe("is_datasets_available", "datasets")
is_deepspeed_available = _package_probe("is_deepspeed_available", "deepspeed")
is_dvclive_available = _package_probe("is_dvclive_available", "dvclive")
is_import_timer_available = _package_probe("is_import_timer_available", "import_timer")
is_lomo_available = _package_probe("is_lomo_available", "lomo_optim")
is_matplotlib_available = _package_probe("is_matplotlib_available", "matplotlib")
is_megatron_lm_available = _package_probe("is_megatron_lm_available", "megatron")
is_mlflow_available = _package_probe("is_mlflow_available", "mlflow")
is_msamp_available = _package_probe("is_msamp_available", "msamp")
is_pandas_available = _package_probe("is_pandas_available", "pandas")
is_peft_available = _package_probe("is_peft_available", "peft")
is_pynvml_available = _package_probe("is_pynvml_available", "pynvml")
is_pytest_available = _package_probe("is_pytest_available", "pytest")
is_sagemaker_available = _package_probe("is_sagemaker_available", "sagemaker")
is_schedulefree_available = _package_probe("is_schedulefree_available", "schedulefree")
is_swanlab_available = _package_probe("is_swanlab_available", "swanlab")
is_timm_available = _package_probe("is_timm_available", "timm")
is_torchao_available = _package_probe("is_torchao_available", "torchao", "0.6.1")
is_torchdata_available = _package_probe("is_torchdata_available", "torchdata")
is_torchdata_stateful_dataloader_available = _package_probe("is_torchdata_stateful_dataloader_available",
                                                            "torchdata", "0.8.0")
is_torchvision_available = _package_probe("is_torchvision_available", "torchvision")
is_tqdm_available = _package_probe("is_tqdm_available", "tqdm")
is_trackio_available = _package_probe("is_trackio_available", "trackio")
is_transformer_engine_available = _package_probe("is_transformer_engine_available", "transformer_engine")
is_transformers_available = _package_probe("is_transformers_available", "transformers")
is_triton_available = _package_probe("is_triton_available", "triton")
is_wandb_available = _package_probe("is_wandb_available", "wandb")


def is_tensorboard_available() -> bool:
    """Whether ``tensorboard`` (or ``tensorboardX``) is installed."""
    return any(importlib.util.find_spec(name) is not None for name in ("tensorboard", "tensorboardX"))


def is_rich_available() -> bool:
    """Whether ``rich`` is installed and ``ACCELERATE_ENABLE_RICH`` asks for it, as Accelerate decides."""
    enabled = os.environ.get("ACCELERATE_ENABLE_RICH", "").strip().lower() in ("1", "true", "yes", "on")
    return enabled and importlib.util.find_spec("rich") is not None


def is_cuda_available() -> bool:
    """Whether a CUDA device can be used."""
    return torch.cuda.is_available()


def is_rocm_available() -> bool:
    """Whether torch was built for ROCm and a GPU can be used."""
    return torch.version.hip is not None and torch.cuda.is_available()


def is_mps_available(min_version: str = "1.12") -> bool:
    """Whether Apple's MPS device can be used."""
    return is_torch_version(">=", min_version) and torch.backends.mps.is_available() and torch.backends.mps.is_built()


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """Whether bf16 computation is supported where the framework computes (always on CPU)."""
    return torch.cuda.is_bf16_supported() if torch.cuda.is_available() else True


def is_fp16_available() -> bool:
    """Whether fp16 computation is supported (on CPU and CUDA, yes)."""
    return True


def is_fp8_available() -> bool:
    """False: the framework does not train in fp8."""
    return False


def is_pippy_available() -> bool:
    """False: the framework does not run pipeline-parallel inference (``prepare_pippy``)."""
    return False


def _not_run_here(name: str, what: str) -> Callable[..., bool]:
    def probe(*args: Any, **kwargs: Any) -> bool:
        return False

    probe.__name__ = probe.__qualname__ = name
    probe.__doc__ = f"False: the framework does not run {what}."
    return probe


is_npu_available = _not_run_here("is_npu_available", "on Ascend NPUs")
is_mlu_available = _not_run_here("is_mlu_available", "on Cambricon MLUs")
is_sdaa_available = _not_run_here("is_sdaa_available", "on SDAA devices")
is_musa_available = _not_run_here("is_musa_available", "on Moore Threads MUSA devices")
is_hpu_available = _not_run_here("is_hpu_available", "on Habana HPUs")
is_habana_gaudi1 = _not_run_here("is_habana_gaudi1", "on Habana Gaudi")
is_xpu_available = _not_run_here("is_xpu_available", "on Intel XPUs")
is_neuron_available = _not_run_here("is_neuron_available", "on AWS Neuron devices")
is_torch_xla_available = _not_run_here("is_torch_xla_available", "on XLA devices (TPUs)")
is_xccl_available = _not_run_here("is_xccl_available", "on Intel XPUs")
is_transformer_engine_mxfp8_available = _not_run_here("is_transformer_engine_mxfp8_available", "in fp8")
is_bitsandbytes_multi_backend_available = _not_run_here("is_bitsandbytes_multi_backend_available",
                                                        "bitsandbytes quantization")
