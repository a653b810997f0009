"""Accelerate's DeepSpeed settings: ``DeepSpeedPlugin`` (a DeepSpeed config, given as a JSON file or a dict, or
built from the plugin's fields), ``HfDeepSpeedConfig``, and ``DummyOptim``/``DummyScheduler`` for an optimizer
and schedule that the config's ``optimizer``/``scheduler`` blocks name. Plain data: nothing here imports
DeepSpeed; the ``Accelerator`` runs the config on DeepSpeed's engine (``framework.accelerate.deepspeed``).

A field left None takes what ``framework launch --use_deepspeed`` (or ``accelerate launch``) put in the
environment, under Accelerate's variable names, else Accelerate's default. ``"auto"`` values are filled as
Accelerate fills them: from the plugin's fields now, from the Accelerator's mixed precision and accumulation when
it is made, and from the prepared dataloader, model and Dummy objects in ``prepare``.

Example::

    plugin = DeepSpeedPlugin(zero_stage=3, offload_optimizer_device="cpu", gradient_clipping=1.0)
    plugin = DeepSpeedPlugin(hf_ds_config="ds_config.json")
    accelerator = Accelerator(deepspeed_plugin=plugin, mixed_precision="bf16")
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from typing import Any

from framework.errors import MisconfigurationError, describe

_OFFLOAD_DEVICES = ("none", "cpu", "nvme")
#: The plugin's fields and where each lives in the DeepSpeed config.
FIELD_PATHS = {
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "gradient_clipping": "gradient_clipping",
    "zero_stage": "zero_optimization.stage",
    "offload_optimizer_device": "zero_optimization.offload_optimizer.device",
    "offload_param_device": "zero_optimization.offload_param.device",
    "offload_param_nvme_path": "zero_optimization.offload_param.nvme_path",
    "offload_optimizer_nvme_path": "zero_optimization.offload_optimizer.nvme_path",
    "zero3_save_16bit_model": "zero_optimization.stage3_gather_16bit_weights_on_model_save",
}


class HfDeepSpeedConfig:
    """A DeepSpeed config read once (a dict, or the path of a JSON file), with lookups by dotted path.

    :param config_file_or_dict: the config: a dict (copied) or a JSON file's path.
    """

    def __init__(self, config_file_or_dict: dict[str, Any] | str | os.PathLike) -> None:
        self.config = read_deepspeed_config(config_file_or_dict)
        stage = self.get_value("zero_optimization.stage", -1)
        self._stage = stage if isinstance(stage, int) else -1

    def find_config_node(self, ds_key_long: str) -> tuple[dict[str, Any] | None, str]:
        """The dict holding the last part of ``ds_key_long`` (None where a part on the way is missing), and that
        part."""
        node: Any = self.config
        *parents, key = ds_key_long.split(".")
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                return None, key
        return node, key

    def get_value(self, ds_key_long: str, default: Any = None) -> Any:
        """The value at the dotted path ``ds_key_long``, else ``default``."""
        node, key = self.find_config_node(ds_key_long)
        return default if node is None else node.get(key, default)

    def is_true(self, ds_key_long: str) -> bool:
        """Whether the value there is true."""
        return bool(self.get_value(ds_key_long))

    def is_false(self, ds_key_long: str) -> bool:
        """Whether the value there is given and false."""
        value = self.get_value(ds_key_long)
        return value is not None and not value

    def is_zero2(self) -> bool:
        """ZeRO stage 2."""
        return self._stage == 2

    def is_zero3(self) -> bool:
        """ZeRO stage 3."""
        return self._stage == 3

    def is_offload(self) -> bool:
        """Whether the optimizer state or the parameters go to the CPU or NVMe."""
        return any(self.get_value(f"zero_optimization.{key}.device", "none") not in ("none", None)
                   for key in ("offload_optimizer", "offload_param"))


def read_deepspeed_config(config: dict[str, Any] | str | os.PathLike) -> dict[str, Any]:
    """A copy of ``config`` (a dict), or the JSON object in the file it names."""
    if isinstance(config, dict):
        return copy.deepcopy(config)
    if not isinstance(config, (str, os.PathLike)):
        raise MisconfigurationError(f"hf_ds_config={describe(config)}: accepted a dict, or the path of a DeepSpeed "
                                    "JSON config file.")
    if not os.path.isfile(config):
        raise MisconfigurationError(f"hf_ds_config={os.fspath(config)!r}: there is no such DeepSpeed config file.")
    with open(config, encoding="utf-8") as file:
        try:
            read = json.load(file)
        except json.JSONDecodeError as error:
            raise MisconfigurationError(f"hf_ds_config={os.fspath(config)!r} is not valid JSON: {error}.") from None
    if not isinstance(read, dict):
        raise MisconfigurationError(f"hf_ds_config={os.fspath(config)!r} holds {describe(read)}; a DeepSpeed config "
                                    "is a JSON object.")
    return read


@dataclass
class DeepSpeedPlugin:
    """Accelerate's DeepSpeed settings (same fields and defaults), run on DeepSpeed's engine (the ``deepspeed``
    extra). ``hf_ds_config`` gives a whole DeepSpeed config; the other fields fill its ``"auto"`` values, or,
    without it, build one (ZeRO ``zero_stage``, offload devices, clipping, accumulation). A field and a config
    value that both say something must agree, else an error names both.

    :param hf_ds_config: a DeepSpeed config: a JSON file's path, a dict or an ``HfDeepSpeedConfig``; None: the
        launcher's ``--deepspeed_config_file``, else one built from the fields.
    :param gradient_accumulation_steps: batches per optimizer step; None: the launcher's, else ``"auto"``
        (the Accelerator's).
    :param gradient_clipping: the gradient norm to clip to; None: the launcher's, else ``"auto"`` (1.0, as
        Accelerate).
    :param zero_stage: 0, 1, 2 or 3; None: the launcher's, else 2.
    :param is_train_batch_min: accepted for Accelerate's sake (which batch size wins when train and evaluation
        loaders differ): the first prepared loader's is used.
    :param offload_optimizer_device: ``"none"``, ``"cpu"`` or ``"nvme"``; None: the launcher's, else ``"none"``.
    :param offload_param_device: as above, for the parameters (ZeRO-3).
    :param offload_optimizer_nvme_path: the NVMe directory for the optimizer state; None: the launcher's.
    :param offload_param_nvme_path: the NVMe directory for the parameters; None: the launcher's.
    :param zero3_init_flag: accepted; the model is built before ``prepare`` and partitioned there (DeepSpeed's
        ``zero.Init`` is not entered).
    :param zero3_save_16bit_model: ZeRO-3's ``stage3_gather_16bit_weights_on_model_save``; ``get_state_dict``
        gathers the whole weights either way.
    :param transformer_moe_cls_names: accepted; not used (no mixture-of-experts leaf modules are marked).
    :param enable_msamp: only False: MS-AMP fp8 is not supported.
    :param msamp_opt_level: not used.
    :param deepspeed_config: not an argument: the plugin sets it to the DeepSpeed config the engine runs, a dict
        (``hf_ds_config``'s, whose ``"auto"`` values the fields, the Accelerator and ``prepare`` fill in).
    :raises MisconfigurationError: where ``enable_msamp`` is set, an offload device is none of "none", "cpu" and
        "nvme", the config has no ``zero_optimization`` block, or a field and the config set one value differently.
    """

    hf_ds_config: Any = None
    gradient_accumulation_steps: int | str | None = None
    gradient_clipping: float | str | None = None
    zero_stage: int | None = None
    is_train_batch_min: bool = True
    offload_optimizer_device: str | None = None
    offload_param_device: str | None = None
    offload_optimizer_nvme_path: str | None = None
    offload_param_nvme_path: str | None = None
    zero3_init_flag: bool | None = None
    zero3_save_16bit_model: bool | None = None
    transformer_moe_cls_names: str | None = None
    enable_msamp: bool | None = None
    msamp_opt_level: str | None = None
    deepspeed_config: dict[str, Any] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._fill_from_environment()
        if self.enable_msamp:
            raise MisconfigurationError("DeepSpeedPlugin(enable_msamp=True) is not supported: no fp8 training here.")
        for name in ("offload_optimizer_device", "offload_param_device"):
            if str(getattr(self, name)).lower() not in _OFFLOAD_DEVICES:
                raise MisconfigurationError(f"DeepSpeedPlugin({name}={getattr(self, name)!r}): accepted "
                                            f"{', '.join(map(repr, _OFFLOAD_DEVICES))}.")
        if self.hf_ds_config is None or self.hf_ds_config == "none":
            self.hf_ds_config = HfDeepSpeedConfig(self._built_config())
        elif not isinstance(self.hf_ds_config, HfDeepSpeedConfig):
            self.hf_ds_config = HfDeepSpeedConfig(self.hf_ds_config)
        self.deepspeed_config = self.hf_ds_config.config
        self.deepspeed_config["steps_per_print"] = float("inf")  # DeepSpeed's periodic prints stay quiet
        if "zero_optimization" not in self.deepspeed_config:
            raise MisconfigurationError("DeepSpeedPlugin: the DeepSpeed config has no zero_optimization block; give "
                                        "one (\"zero_optimization\": {\"stage\": 2}, say).")
        if self.deepspeed_config.get("gradient_accumulation_steps", "auto") == "auto":
            self.deepspeed_config["gradient_accumulation_steps"] = self.gradient_accumulation_steps
        given = {path: getattr(self, name) for name, path in FIELD_PATHS.items()
                 if getattr(self, name) is not None and name in self._explicit}
        self.deepspeed_config_process(must_match=True, **given)
        self.deepspeed_config_process(must_match=False, **{path: getattr(self, name) for name, path in
                                                           FIELD_PATHS.items() if getattr(self, name) is not None})
        for name, path in FIELD_PATHS.items():  # the fields say what the config holds (zero_stage ...)
            value = self.get_value(path)
            if value is not None and value != "auto":
                setattr(self, name, value)
        if self.zero3_init_flag is None:
            self.zero3_init_flag = self.hf_ds_config.is_zero3()
        if self.zero3_init_flag and not self.hf_ds_config.is_zero3():
            self.zero3_init_flag = False

    def _fill_from_environment(self) -> None:
        """The fields left None from the launcher's variables, else Accelerate's defaults; ``_explicit`` keeps the
        names the caller or the launcher gave (they must agree with a config file's values)."""
        self._explicit = {name for name in FIELD_PATHS if getattr(self, name) is not None}
        environment = os.environ
        if self.hf_ds_config is None and environment.get("ACCELERATE_DEEPSPEED_CONFIG_FILE", "none") != "none":
            self.hf_ds_config = environment["ACCELERATE_DEEPSPEED_CONFIG_FILE"]
        for name, variable, default, convert in (
                ("gradient_accumulation_steps", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "auto", _int_or_auto),
                ("gradient_clipping", "ACCELERATE_GRADIENT_CLIPPING", "auto", _float_or_auto),
                ("zero_stage", "ACCELERATE_DEEPSPEED_ZERO_STAGE", 2, int),
                ("offload_optimizer_device", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "none", str.lower),
                ("offload_param_device", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "none", str.lower),
                ("offload_optimizer_nvme_path", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH", "none", str),
                ("offload_param_nvme_path", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH", "none", str),
                ("zero3_save_16bit_model", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", False, _true)):
            if getattr(self, name) is not None:
                continue
            if variable in environment:
                self._explicit.add(name)
            raw = environment.get(variable)
            setattr(self, name, default if raw is None else _converted(convert, raw, variable))
        if self.zero3_init_flag is None and "ACCELERATE_DEEPSPEED_ZERO3_INIT" in environment:
            self.zero3_init_flag = _true(environment["ACCELERATE_DEEPSPEED_ZERO3_INIT"])

    def _built_config(self) -> dict[str, Any]:
        """The config the fields describe (no ``hf_ds_config``), as Accelerate builds it."""
        zero: dict[str, Any] = {"stage": self.zero_stage,
                                "offload_optimizer": {"device": self.offload_optimizer_device},
                                "offload_param": {"device": self.offload_param_device},
                                "stage3_gather_16bit_weights_on_model_save": self.zero3_save_16bit_model}
        for key, path in (("offload_optimizer", self.offload_optimizer_nvme_path),
                          ("offload_param", self.offload_param_nvme_path)):
            if zero[key]["device"] == "nvme":
                zero[key]["nvme_path"] = path
        config: dict[str, Any] = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                                  "gradient_accumulation_steps": self.gradient_accumulation_steps,
                                  "zero_optimization": zero}
        if self.gradient_clipping:
            config["gradient_clipping"] = self.gradient_clipping
        return config

    # -- Accelerate's config helpers ---
    def get_value(self, ds_key_long: str, default: Any = None) -> Any:
        """The config's value at the dotted path ``ds_key_long``, else ``default``."""
        return self.hf_ds_config.get_value(ds_key_long, default)

    def is_auto(self, ds_key_long: str) -> bool:
        """Whether the config leaves that value ``"auto"``."""
        return self.get_value(ds_key_long) == "auto"

    def fill_match(self, ds_key_long: str, mismatches: list[str] | None = None, must_match: bool = True,
                   **kwargs: Any) -> None:
        """Fill the ``"auto"`` value at ``ds_key_long`` from ``kwargs[ds_key_long]``; with ``must_match`` a set
        value that differs is added to ``mismatches`` (raised at once when that is None).

        :raises MisconfigurationError: with ``must_match`` and no ``mismatches`` list, where the config's value differs.
        """
        node, key = self.hf_ds_config.find_config_node(ds_key_long)
        if node is None or ds_key_long not in kwargs:
            return
        wanted, current = kwargs[ds_key_long], node.get(key)
        if current == "auto":
            node[key] = wanted
        elif must_match and current is not None and current != wanted and wanted != "auto":
            problem = f"- ds {ds_key_long}={current!r} vs the plugin's or run's {wanted!r}"
            if mismatches is None:
                raise MisconfigurationError(f"The DeepSpeed config and the settings disagree:\n{problem}\nSet each "
                                            "value in one place (or \"auto\" in the config).")
            mismatches.append(problem)

    def deepspeed_config_process(self, prefix: str = "", mismatches: list[str] | None = None,
                                 config: dict[str, Any] | None = None, must_match: bool = True,
                                 **kwargs: Any) -> None:
        """Fill every ``"auto"`` value of the config that ``kwargs`` (by dotted path) gives; with ``must_match``,
        values set in both that differ are an error listing all of them.

        :raises MisconfigurationError: with ``must_match`` and no ``mismatches`` list, where values differ.
        """
        found: list[str] = [] if mismatches is None else mismatches
        node = self.deepspeed_config if config is None else config
        for key, value in node.items():
            if isinstance(value, dict):
                self.deepspeed_config_process(f"{prefix}{key}.", found, value, must_match, **kwargs)
            else:
                self.fill_match(f"{prefix}{key}", found, must_match, **kwargs)
        if mismatches is None and found:
            raise MisconfigurationError("The DeepSpeed config and the settings disagree:\n" + "\n".join(found) +
                                        "\nSet each value in one place (or \"auto\" in the config).")

    def set_mixed_precision(self, mixed_precision: str) -> None:
        """The config's ``fp16``/``bf16`` blocks for the Accelerator's ``mixed_precision``: added where missing,
        their ``"auto"`` filled; one enabled for the other precision is an error.

        :raises MisconfigurationError: where the config enables the other of ``fp16`` and ``bf16``.
        """
        config = self.deepspeed_config
        if mixed_precision in ("fp16", "bf16"):
            other = "bf16" if mixed_precision == "fp16" else "fp16"
            if str((config.get(other) or {}).get("enabled", False)).lower() == "true":
                raise MisconfigurationError(f"mixed_precision={mixed_precision!r} does not go with the DeepSpeed "
                                            f"config's {other} block, which is enabled; change one.")
            config.setdefault(mixed_precision, {"enabled": True})
        for block in ("fp16", "bf16"):
            config.setdefault(block, {"enabled": False})
            if config[block].get("enabled") == "auto":
                config[block]["enabled"] = mixed_precision == block

    def config_mixed_precision(self) -> str | None:
        """``"fp16"`` or ``"bf16"`` where the config enables that block (not ``"auto"``), else None."""
        for block in ("fp16", "bf16"):
            if (self.deepspeed_config.get(block) or {}).get("enabled") is True:
                return block
        return None

    @property
    def zero_stage_of_config(self) -> int:
        """The ZeRO stage the config asks for."""
        return int(self.get_value("zero_optimization.stage", 0) or 0)


class DummyOptim:
    """Stands for the optimizer the DeepSpeed config's ``optimizer`` block names: ``prepare`` has DeepSpeed build
    it over ``params``, with ``lr`` and ``weight_decay`` filling that block's ``"auto"`` values.

    :param params: the parameters to optimize (``model.parameters()``).
    :param lr: the learning rate (default 0.001).
    :param weight_decay: the weight decay (default 0).
    :param kwargs: kept, as Accelerate keeps them.
    """

    def __init__(self, params: Any, lr: float = 0.001, weight_decay: float = 0, **kwargs: Any) -> None:
        self.params, self.lr, self.weight_decay, self.kwargs = params, lr, weight_decay, kwargs


class DummyScheduler:
    """Stands for the schedule the DeepSpeed config's ``scheduler`` block names (DeepSpeed builds and steps it),
    or, with ``lr_scheduler_callable``, for the scheduler that callable makes from the optimizer DeepSpeed built.

    :param optimizer: the ``DummyOptim`` (or optimizer) it schedules.
    :param total_num_steps: the schedule's total steps over all processes (``"auto"``-filled, divided by the
        number of processes, as Accelerate does); None: left to the config.
    :param warmup_num_steps: warm-up steps (default 0).
    :param lr_scheduler_callable: ``callable(optimizer)`` returning a torch scheduler; None: the config's block.
    :param kwargs: kept, as Accelerate keeps them.
    """

    def __init__(self, optimizer: Any, total_num_steps: int | None = None, warmup_num_steps: int = 0,
                 lr_scheduler_callable: Any = None, **kwargs: Any) -> None:
        self.optimizer, self.total_num_steps, self.warmup_num_steps = optimizer, total_num_steps, warmup_num_steps
        self.lr_scheduler_callable, self.kwargs = lr_scheduler_callable, kwargs


def _converted(convert: Any, raw: str, variable: str) -> Any:
    try:
        return convert(raw)
    except ValueError:
        raise MisconfigurationError(f"{variable}={raw!r} is not understood.") from None


def _int_or_auto(raw: str) -> int | str:
    return raw if raw == "auto" else int(raw)


def _float_or_auto(raw: str) -> float | str:
    return raw if raw == "auto" else float(raw)


def _true(raw: Any) -> bool:
    return str(raw).strip().lower() in ("true", "1", "yes", "y", "on")


def get_active_deepspeed_plugin(state: Any) -> DeepSpeedPlugin:
    """The DeepSpeed plugin of ``state`` (an ``AcceleratorState``); an error where there is none.

    :param state: the ``AcceleratorState`` (``accelerator.state``).
    :raises MisconfigurationError: where the Accelerator has no DeepSpeed plugin.
    """
    plugin = getattr(state, "deepspeed_plugin", None)
    if plugin is None:
        raise MisconfigurationError("get_active_deepspeed_plugin(): the Accelerator has no DeepSpeed plugin "
                                    "(Accelerator(deepspeed_plugin=...) or `framework launch --use_deepspeed`).")
    return plugin
