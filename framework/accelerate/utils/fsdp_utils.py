"""FSDP helpers under Accelerate's names: which submodules become units of their own (the wrap policies),
whole weights out of a sharded ``save_state`` folder, and whole weights into a sharded model."""

from __future__ import annotations

import os
import shutil
from typing import Any

from framework.accelerate.config_keys import KEYS, WRAP_POLICIES
from framework.accelerate.weights import save_sharded_weights
from framework.errors import MisconfigurationError
from framework.io.checkpoint_dir import load_sharded
from framework.runtime.wrappers import forward_module


class ClassNames:
    """A wrap policy matching submodules by class name (``fsdp_transformer_layer_cls_to_wrap``)."""

    def __init__(self, names: Any) -> None:
        if isinstance(names, str):
            names = names.split(",")
        self.names = frozenset(name.strip() for name in names if name.strip())

    def __call__(self, module: Any) -> bool:
        return type(module).__name__ in self.names

    def __repr__(self) -> str:
        return f"ClassNames({sorted(self.names)})"


class AtLeast:
    """A wrap policy matching submodules of at least ``min_num_params`` parameters (``SIZE_BASED_WRAP``)."""

    def __init__(self, min_num_params: int) -> None:
        self.min_num_params = min_num_params

    def __call__(self, module: Any) -> bool:
        return sum(parameter.numel() for parameter in module.parameters()) >= self.min_num_params


def wrap_policy(name: Any, classes: Any, min_num_params: int | None) -> Any:
    """The auto-wrap policy: a callable given as it is; the named layer classes, a parameter count, the whole
    model (``NO_WRAP``), or, unnamed, the framework's default of one unit per block."""
    if callable(name):
        return name
    if name is None or name == "":
        return ClassNames(classes) if classes else "auto"
    name = str(name).strip().upper()
    if name == "TRANSFORMER_BASED_WRAP":
        return ClassNames(classes) if classes else "auto"
    if name == "SIZE_BASED_WRAP":
        return AtLeast(min_num_params or KEYS["fsdp_min_num_params"].default)
    if name == "NO_WRAP":
        return None
    raise MisconfigurationError(f"fsdp_auto_wrap_policy={name!r} is not understood; accepted "
                                f"{', '.join(WRAP_POLICIES)}.")


def fsdp2_prepare_auto_wrap_policy(fsdp2_plugin: Any, model: Any) -> Any:
    """The plugin's wrap policy as a callable taking a submodule (None: the model is one unit)."""
    fsdp2_plugin.set_auto_wrap_policy(model)
    return wrap_policy(fsdp2_plugin.auto_wrap_policy, fsdp2_plugin.transformer_cls_names_to_wrap,
                       fsdp2_plugin.min_num_params)


def merge_fsdp_weights(checkpoint_dir: str, output_path: str, safe_serialization: bool = True,
                       remove_checkpoint_dir: bool = False) -> None:
    """Write the model weights of a sharded ``save_state`` folder (``pytorch_model_fsdp_0``) whole, as
    ``output_path/model.safetensors`` (``pytorch_model.bin`` without safetensors); run it on one process."""
    state = load_sharded(checkpoint_dir)
    state = state.get("model", state)
    save_sharded_weights(state, os.fspath(output_path), "10GB", safe_serialization)
    if remove_checkpoint_dir:
        shutil.rmtree(checkpoint_dir)


def fsdp2_load_full_state_dict(accelerator: Any, model: Any, full_sd: dict[str, Any], cpu_offload: bool = False
                               ) -> None:
    """Load a whole state dict into a prepared (sharded) model; every process calls it."""
    accelerator._runtime.strategy.load_module_state(forward_module(model), full_sd)


def fsdp2_prepare_model(accelerator: Any, model: Any) -> Any:
    """``model`` sharded as ``accelerator.prepare`` shards it; returns the prepared model."""
    return accelerator.prepare_model(model)


def fsdp2_switch_optimizer_parameters(optimizer: Any, mapping: dict[Any, Any]) -> None:
    """Make ``optimizer`` update the new parameters: each parameter ``p`` whose ``data_ptr()`` is a key of
    ``mapping`` is replaced by ``mapping[p.data_ptr()]``."""
    for group in optimizer.param_groups:
        group["params"] = [mapping.get(parameter.data_ptr(), parameter) for parameter in group["params"]]


def enable_fsdp_ram_efficient_loading() -> None:
    """Set ``FSDP_CPU_RAM_EFFICIENT_LOADING`` for libraries that read it (Transformers' ``from_pretrained``)."""
    os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "True"


def disable_fsdp_ram_efficient_loading() -> None:
    """Unset what ``enable_fsdp_ram_efficient_loading`` set."""
    os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "False"
