"""Names Accelerate exports for engines the framework does not run (Megatron-LM, fp8 engines,
bitsandbytes quantization, XLA, big-model dispatch): importing them works, so a script that only mentions them
runs; using one raises a ``MisconfigurationError`` that says what to use instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from framework.errors import MisconfigurationError

_MEGATRON = ("the framework does not run Megatron-LM; for tensor parallelism use "
             "framework.strategies.ModelParallelStrategy")
_FP8 = "the framework does not train in fp8 (Transformer Engine, MS-AMP, torchao); use mixed_precision='bf16'"
_QUANTIZATION = "the framework does not quantize models with bitsandbytes"
_XLA = "the framework does not run on XLA devices (TPUs)"
_DISPATCH = ("the framework does not split one model over several devices or offload it for inference (device "
             "maps); use Accelerate itself for big-model inference")


def _refusal(name: str, reason: str) -> MisconfigurationError:
    return MisconfigurationError(f"{name} is not supported: {reason}.")


def refused_function(name: str, reason: str) -> Callable[..., NoReturn]:
    """A function named ``name`` that raises, saying ``reason``, when called."""

    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise _refusal(f"{name}()", reason)

    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"Refused when called: {reason}.\n\n:raises MisconfigurationError: always: {reason}."
    return refuse


def refused_class(name: str, reason: str) -> type:
    """A class named ``name`` that can be imported, subclassed and named in ``isinstance``, and raises, saying
    ``reason``, when instantiated."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise _refusal(name, reason)

    doc = f"Refused when created: {reason}.\n\n:raises MisconfigurationError: always: {reason}."
    return type(name, (), {"__init__": __init__, "__doc__": doc, "__module__": __name__})


MegatronLMPlugin = refused_class("MegatronLMPlugin", _MEGATRON)
MegatronLMDummyScheduler = refused_class("MegatronLMDummyScheduler", _MEGATRON)
MegatronLMDummyDataLoader = refused_class("MegatronLMDummyDataLoader", _MEGATRON)
AbstractTrainStep = refused_class("AbstractTrainStep", _MEGATRON)
GPTTrainStep = refused_class("GPTTrainStep", _MEGATRON)
BertTrainStep = refused_class("BertTrainStep", _MEGATRON)
T5TrainStep = refused_class("T5TrainStep", _MEGATRON)
avg_losses_across_data_parallel_group = refused_function("avg_losses_across_data_parallel_group", _MEGATRON)

convert_model = refused_function("convert_model", _FP8)
contextual_fp8_autocast = refused_function("contextual_fp8_autocast", _FP8)
apply_fp8_autowrap = refused_function("apply_fp8_autowrap", _FP8)

BnbQuantizationConfig = refused_class("BnbQuantizationConfig", _QUANTIZATION)
load_and_quantize_model = refused_function("load_and_quantize_model", _QUANTIZATION)

install_xla = refused_function("install_xla", _XLA)

infer_auto_device_map = refused_function("infer_auto_device_map", _DISPATCH)
get_balanced_memory = refused_function("get_balanced_memory", _DISPATCH)
offload_state_dict = refused_function("offload_state_dict", _DISPATCH)
load_offloaded_weights = refused_function("load_offloaded_weights", _DISPATCH)


def has_transformer_engine_layers(model: Any) -> bool:
    """False: the framework never puts Transformer Engine layers in a model."""
    return False
