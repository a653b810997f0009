"""The DeepSpeed config a run uses: the user's (a dict or a JSON file), or one built from Lightning's
``DeepSpeedStrategy`` arguments, completed with what the run decides (precision, gradient accumulation,
clipping, batch size) and checked before DeepSpeed sees it. Plain dicts: nothing here imports DeepSpeed.

Where the user's config and the run both set a value, they must agree: a config's ``gradient_accumulation_steps:
4`` beside ``Trainer(accumulate_grad_batches=2)`` is an error naming both, not a silent choice. ``"auto"``
values are filled from the run, as Accelerate fills them.

Example::

    config = lightning_config(stage=3, offload_optimizer=True)
    config = completed_config(config, RunSettings(accumulate=2, clip_norm=1.0, micro_batch_size=8,
                                                  world_size=2, precision="bf16-mixed"))
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from typing import Any

from framework.errors import MisconfigurationError, describe

STAGES = (0, 1, 2, 3)
OFFLOAD_DEVICES = ("cpu", "nvme", "none")
#: Lightning's environment variable naming a JSON config when ``config=`` is not given.
CONFIG_ENV = "PL_DEEPSPEED_CONFIG_PATH"
#: Precisions DeepSpeed runs, and the config block each maps to (None: fp32, no block).
PRECISION_BLOCKS = {"32-true": None, "32": None, "16-mixed": "fp16", "16-true": "fp16", "bf16-mixed": "bf16",
                    "bf16-true": "bf16"}


def read_config(config: str | os.PathLike | dict[str, Any] | None) -> dict[str, Any] | None:
    """A copy of the user's config: ``config`` itself (a dict), or the JSON file it names; without one, the file
    ``PL_DEEPSPEED_CONFIG_PATH`` names; else None."""
    if config is None and os.environ.get(CONFIG_ENV):
        config = os.environ[CONFIG_ENV]
    if config is None:
        return None
    if isinstance(config, dict):
        return copy.deepcopy(config)
    if not isinstance(config, (str, os.PathLike)):
        raise MisconfigurationError(f"config={describe(config)}: accepted a dict, or the path of a DeepSpeed JSON "
                                    "config file.")
    if not os.path.isfile(config):
        raise MisconfigurationError(f"config={os.fspath(config)!r}: there is no such DeepSpeed config file.")
    with open(config) as file:
        try:
            read = json.load(file)
        except json.JSONDecodeError as error:
            raise MisconfigurationError(f"config={os.fspath(config)!r} is not valid JSON: {error}.") from None
    if not isinstance(read, dict):
        raise MisconfigurationError(f"config={os.fspath(config)!r} holds {describe(read)}; a DeepSpeed config is a "
                                    "JSON object.")
    return read


def lightning_config(
    zero_optimization: bool = True, stage: int = 2, offload_optimizer: bool = False,
    offload_parameters: bool = False, offload_params_device: str = "cpu", nvme_path: str = "/local_nvme",
    params_buffer_count: int = 5, params_buffer_size: int = 100_000_000, max_in_cpu: int = 1_000_000_000,
    offload_optimizer_device: str = "cpu", optimizer_buffer_count: int = 4, block_size: int = 1048576,
    queue_depth: int = 8, single_submit: bool = False, overlap_events: bool = True, thread_count: int = 1,
    pin_memory: bool = False, zero_allow_untested_optimizer: bool = True,
    logging_batch_size_per_gpu: str | int = "auto", partition_activations: bool = False,
    cpu_checkpointing: bool = False, contiguous_memory_optimization: bool = False,
    synchronize_checkpoint_boundary: bool = False, **zero_options: Any,
) -> dict[str, Any]:
    """The config Lightning's ``DeepSpeedStrategy`` builds from its arguments (same names, same defaults)."""
    if stage not in STAGES or isinstance(stage, bool):
        raise MisconfigurationError(f"DeepSpeedStrategy(stage={describe(stage)}): accepted 0, 1, 2 or 3.")
    config: dict[str, Any] = {
        "activation_checkpointing": {
            "partition_activations": partition_activations, "cpu_checkpointing": cpu_checkpointing,
            "contiguous_memory_optimization": contiguous_memory_optimization,
            "synchronize_checkpoint_boundary": synchronize_checkpoint_boundary},
        "aio": {"block_size": block_size, "queue_depth": queue_depth, "single_submit": single_submit,
                "overlap_events": overlap_events, "thread_count": thread_count},
    }
    if zero_optimization:
        zero = {"stage": stage, **zero_options}
        if offload_optimizer:
            zero["offload_optimizer"] = {"device": offload_optimizer_device, "nvme_path": nvme_path,
                                         "buffer_count": optimizer_buffer_count, "pin_memory": pin_memory}
        if offload_parameters:
            zero["offload_param"] = {"device": offload_params_device, "nvme_path": nvme_path,
                                     "buffer_count": params_buffer_count, "buffer_size": params_buffer_size,
                                     "max_in_cpu": max_in_cpu, "pin_memory": pin_memory}
        config = {"zero_allow_untested_optimizer": zero_allow_untested_optimizer, "zero_optimization": zero,
                  **config}
    if logging_batch_size_per_gpu != "auto":
        config = {"train_micro_batch_size_per_gpu": logging_batch_size_per_gpu, **config}
    return config


def check_config(config: dict[str, Any], source: str = "the DeepSpeed config") -> None:
    """Refuse what DeepSpeed would fail on later, or obscurely: an unknown ZeRO stage, an unknown offload
    device, NVMe offload without a directory to offload to."""
    zero = config.get("zero_optimization") or {}
    if not isinstance(zero, dict):
        raise MisconfigurationError(f"{source}: zero_optimization={describe(zero)}; accepted a JSON object.")
    stage = zero.get("stage", 0)
    if stage not in STAGES or isinstance(stage, bool):
        raise MisconfigurationError(f"{source}: zero_optimization.stage={describe(stage)}; accepted 0, 1, 2 or 3.")
    for key in ("offload_optimizer", "offload_param"):
        offload = zero.get(key)
        if not offload:
            continue
        device = offload.get("device", "none")
        if device not in OFFLOAD_DEVICES:
            raise MisconfigurationError(f"{source}: zero_optimization.{key}.device={describe(device)}; accepted "
                                        f"{', '.join(map(repr, OFFLOAD_DEVICES))}.")
        if device == "nvme":
            path = offload.get("nvme_path")
            if not path or not os.path.isdir(path):
                raise MisconfigurationError(
                    f"{source}: zero_optimization.{key} offloads to NVMe, but nvme_path={describe(path)} is not an "
                    "existing directory. Give the directory on the NVMe drive (DeepSpeedStrategy(nvme_path=...) or "
                    f"\"nvme_path\" in {key}), or offload to \"cpu\".")


@dataclass(frozen=True)
class RunSettings:
    """What the run decides that DeepSpeed's config also holds.

    :param accumulate: micro-batches per optimizer step (``accumulate_grad_batches``).
    :param clip_norm: the gradient norm to clip to (``gradient_clip_val``); None: no clipping asked.
    :param micro_batch_size: the batch size on one rank, where known.
    :param world_size: the number of ranks.
    :param precision: the precision's name (``"bf16-mixed"`` ...).
    :param loss_scale: Lightning's fp16 loss-scale arguments (``loss_scale``, ``initial_scale_power``, ...).
    """

    accumulate: int = 1
    clip_norm: float | None = None
    micro_batch_size: int | None = None
    world_size: int = 1
    precision: str = "32-true"
    loss_scale: dict[str, Any] | None = None


def completed_config(config: dict[str, Any], run: RunSettings) -> dict[str, Any]:
    """``config`` with the run's settings in it, checked: where both set a value and they differ, an error names
    both (a config's clipping under a run that asks for none stands)."""
    config = copy.deepcopy(config)
    # The loop decides when the optimizer steps: a config that accumulates otherwise would be silently ignored.
    _agree(config, "gradient_accumulation_steps", run.accumulate, "accumulate_grad_batches / "
           "gradient_accumulation_steps", default=None)
    if run.clip_norm:
        _agree(config, "gradient_clipping", float(run.clip_norm), "gradient_clip_val / gradient_clipping",
               default=0.0)
    elif config.get("gradient_clipping") in (None, "auto"):
        config["gradient_clipping"] = 0.0
    micro = config.get("train_micro_batch_size_per_gpu")
    if micro in (None, "auto"):
        micro = config["train_micro_batch_size_per_gpu"] = run.micro_batch_size or 1
    whole = micro * config["gradient_accumulation_steps"] * run.world_size
    if config.get("train_batch_size") in (None, "auto"):
        config["train_batch_size"] = whole
    elif config["train_batch_size"] != whole:
        raise MisconfigurationError(
            f"The DeepSpeed config's train_batch_size={config['train_batch_size']} is not "
            f"train_micro_batch_size_per_gpu ({micro}) x gradient_accumulation_steps "
            f"({config['gradient_accumulation_steps']}) x ranks ({run.world_size}) = {whole}. Remove it (it is "
            "derived) or make the three agree.")
    _precision_block(config, run)
    unfilled = sorted(_auto_paths(config))
    if unfilled:
        raise MisconfigurationError(
            f"The DeepSpeed config leaves {', '.join(unfilled)} as \"auto\", which only Accelerate's model-dependent "
            "rules fill. Give numbers for them.")
    return config


def _agree(config: dict[str, Any], key: str, value: Any, names: str, default: Any) -> None:
    current = config.get(key)
    if current in (None, "auto") or current == value:
        config[key] = value
    elif value == default:  # the run left it at its default: the config's value stands
        return
    else:
        raise MisconfigurationError(
            f"{names}: the run has {value!r} and the DeepSpeed config's {key} is {current!r}. Set it in one "
            "place (or to the same value in both).")


def _precision_block(config: dict[str, Any], run: RunSettings) -> None:
    wanted = PRECISION_BLOCKS.get(run.precision)
    enabled = [block for block in ("fp16", "bf16") if (config.get(block) or {}).get("enabled") in (True, "auto")]
    if wanted is None:
        for block in enabled:  # the config's own 16-bit mode, under the default precision: the config wins
            config[block]["enabled"] = True
        return
    other = [block for block in enabled if block != wanted]
    if other:
        raise MisconfigurationError(
            f"precision={run.precision!r} and the DeepSpeed config's {other[0]} block (enabled) disagree. Use "
            f"precision={'16-mixed' if other[0] == 'fp16' else 'bf16-mixed'!r} or remove that block.")
    block = dict(config.get(wanted) or {})
    block["enabled"] = True
    if wanted == "fp16":
        for key, value in (run.loss_scale or {}).items():
            block.setdefault(key, value)
    config[wanted] = block


def dtype_name(config: dict[str, Any]) -> str:
    """``"fp16"``, ``"bf16"`` or ``"fp32"``: the weights' dtype under ``config``."""
    for block in ("fp16", "bf16"):
        if (config.get(block) or {}).get("enabled") is True:
            return block
    return "fp32"


def _auto_paths(value: Any, path: str = "") -> list[str]:
    if value == "auto":
        return [path]
    if isinstance(value, dict):
        return [found for key, entry in value.items() for found in _auto_paths(entry, f"{path}.{key}".lstrip("."))]
    return []
