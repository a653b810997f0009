"""Accelerate's launch config (the YAML ``accelerate config`` writes) as ``framework launch`` reads it and
``framework config`` writes it.

A file or a command line is read into :class:`Settings`: one flat mapping from Accelerate's key names
(``num_processes``, ``fsdp_version``, ``dynamo_backend`` ...; the ``fsdp_config:`` and ``dynamo_config:``
sections flattened, as ``accelerate launch`` flattens them into its flags) to checked values, each with the
place that gave it. Flags are laid over a file with :meth:`Settings.over`. What cannot be honoured is refused
with the key, the value and what is accepted; the keys ``accelerate config`` writes for things a launcher
here need not act on (TPU pods, debug checks, CPU affinity ...) are read and ignored.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from framework.accelerate.config_keys import (
    CHECKS,
    DEEPSPEED_KEYS,
    DISTRIBUTED_TYPES,
    DYNAMO_KEYS,
    FSDP_KEYS,
    TOP_LEVEL,
)
from framework.accelerate.config_values import Refused, empty_section
from framework.cli.errors import ConfigError

# Written by `accelerate config` for what a launcher here need not act on: read, not used.
IGNORED = ("debug", "downcast_bf16", "enable_cpu_affinity", "main_training_function", "same_network", "tpu_name",
           "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "tpu_vm", "tpu_env", "command_file", "commands")
_EMPTY_SECTIONS = {  # sections `accelerate config` leaves empty unless a feature we lack is chosen
    "megatron_lm_config": "Megatron-LM is not used here",
    "fp8_config": "FP8 training is not supported",
    "mpirun_config": "CPU ranks are started with torchrun here, not mpirun",
    "parallelism_config": "its tensor/context-parallel sizes are not read here (HSDP: fsdp_sharding_strategy "
                          "HYBRID_SHARD; tensor parallelism: the Trainer's ModelParallelStrategy)",
}
_SECTIONS = {"fsdp_config": FSDP_KEYS, "dynamo_config": DYNAMO_KEYS, "deepspeed_config": DEEPSPEED_KEYS}
_KNOWN = (*TOP_LEVEL, *_SECTIONS, *_EMPTY_SECTIONS, *IGNORED)
_SECTION_RUNS = {"fsdp_config": "FSDP", "deepspeed_config": "DEEPSPEED"}  # written only for that kind of run
_ALIASES = {"fsdp_backward_prefetch_policy": "fsdp_backward_prefetch"}  # older Accelerate versions' name


@dataclass
class Settings:
    """Checked launch settings by Accelerate's key name, and where each was given (for error messages)."""

    values: dict[str, Any] = field(default_factory=dict)
    places: dict[str, str] = field(default_factory=dict)  # key -> "--config_file a.yaml:3: num_processes" or a flag

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key``, or ``default`` when nothing gave it."""
        return self.values.get(key, default)

    def set(self, key: str, value: Any, place: str) -> None:
        """Check ``value`` for ``key`` and keep it; a refused value raises :class:`ConfigError` naming ``place``."""
        try:
            self.values[key] = CHECKS[key](value)
        except Refused as refused:
            raise ConfigError(f"{place}: {refused}") from None
        self.places[key] = place

    def over(self, base: Settings) -> Settings:
        """These settings laid over ``base``: where both give a key, this one's value wins."""
        return Settings({**base.values, **self.values}, {**base.places, **self.places})

    def error(self, key: str, problem: str) -> ConfigError:
        """The error for a value of ``key`` that does not fit with the others."""
        return ConfigError(f"{self.places.get(key, key)}: {problem}")


def read_config(path: str | os.PathLike) -> Settings:
    """The settings of the Accelerate config file at ``path`` (YAML, or the JSON ``accelerate config default``
    writes), every key checked; refused keys and values raise :class:`ConfigError` naming the file and line.

    Example::

        settings = read_config("accelerate.yaml")
        settings.get("num_processes")  # 2
    """
    label = f"--config_file {path}"
    tree, lines = _load(Path(path), label)
    settings = Settings()
    for key, value in tree.items():
        place = f"{label}:{lines[(key,)].rsplit(':', 1)[1]}"
        if key in _SECTIONS and value is not None:
            _read_section(settings, key, value, place, lines, label)
        elif key in _EMPTY_SECTIONS:
            if not empty_section(value):
                raise ConfigError(f"{place}: {key}: {_EMPTY_SECTIONS[key]}; remove the section or leave it empty.")
        elif key in TOP_LEVEL or key in DYNAMO_KEYS:  # dynamo_backend at the top: older Accelerate's layout
            if value is not None:  # Accelerate drops keys whose value is null
                settings.set(key, value, f"{place}: {key}")
        elif key not in IGNORED:
            raise ConfigError(f"{place}: {key!r} is not a key of Accelerate's config file{_nearest(key, _KNOWN)}; "
                              f"keys read: {', '.join([*TOP_LEVEL, *_SECTIONS])} (and the ones accelerate config "
                              f"writes for what is not used here: {', '.join([*_EMPTY_SECTIONS, *IGNORED[:5]])} ...).")
    if "distributed_type" not in settings.values:
        raise ConfigError(f"{label}: distributed_type is not given; accepted: {', '.join(DISTRIBUTED_TYPES)}.")
    return settings


def _read_section(settings: Settings, section: str, values: Any, place: str, lines: dict, label: str) -> None:
    if not isinstance(values, dict):
        raise ConfigError(f"{place}: {section}: a mapping of its keys ({', '.join(_SECTIONS[section])}), got "
                          f"{values!r}.")
    known = _SECTIONS[section]
    prefix = "" if section == "deepspeed_config" else section.split("_")[0] + "_"  # its keys have none
    for name, value in values.items():
        here = f"{label}:{lines[(section, name)].rsplit(':', 1)[1]}: {section}.{name}"
        key = _ALIASES.get(name, name if name.startswith(prefix) else prefix + name)  # Accelerate adds the prefix
        if key not in known:
            raise ConfigError(f"{here}: not a key of {section}{_nearest(key, known, prefix)}; known keys: "
                              f"{', '.join(known)}.")
        if value is not None:
            settings.set(key, value, here)


def _nearest(key: str, known: Iterable[str], prefix: str = "") -> str:
    """`` (did you mean 'use_cpu'?)`` for a misspelt key; names are compared without the section's prefix."""
    import difflib

    names = {name.removeprefix(prefix): name for name in known}
    close = difflib.get_close_matches(key.removeprefix(prefix), list(names), n=1, cutoff=0.75)
    return f" (did you mean {names[close[0]]!r}?)" if close else ""


def _load(path: Path, label: str) -> tuple[dict, dict]:
    from framework.cli import yaml_files

    if not path.is_file():
        raise ConfigError(f"{label}: no such file (looked in {Path.cwd()}). `framework config --config_file {path}` "
                          f"writes one.")
    try:
        tree, lines = yaml_files.load(path)
    except ConfigError as error:
        if str(error).startswith(f"{path}:") and "mapping of sections" in str(error):
            raise ConfigError(f"{label}: an Accelerate config is a mapping of keys (distributed_type: ...).") from None
        raise ConfigError(f"--config_file {error}") from None
    if not tree:
        raise ConfigError(f"{label}: the file is empty; `framework config --config_file {path}` writes one.")
    return tree, lines


def check_fsdp(settings: Settings) -> None:
    """Refuse FSDP settings that do not go together, as Accelerate's FSDP plugin would when the ranks start."""
    version = settings.get("fsdp_version", 1)
    reshard_value = settings.get("fsdp_reshard_after_forward")
    if version == 2 and reshard_value is not None and not isinstance(reshard_value, bool):
        raise settings.error("fsdp_reshard_after_forward", f"{reshard_value!r} is a sharding strategy, which FSDP "
                             f"version 2 does not take; accepted with fsdp_version 2: true, false.")
    if version == 2 and settings.get("fsdp_state_dict_type") == "LOCAL_STATE_DICT":
        raise settings.error("fsdp_state_dict_type", "'LOCAL_STATE_DICT' needs fsdp_version 1; accepted with "
                             "fsdp_version 2: SHARDED_STATE_DICT, FULL_STATE_DICT.")
    if version == 1 and settings.get("fsdp_cpu_ram_efficient_loading", True) and \
            not settings.get("fsdp_sync_module_states", True):
        raise settings.error("fsdp_sync_module_states", "false does not go with fsdp_cpu_ram_efficient_loading true "
                             "(the other ranks would keep empty weights); set it true, or the other false.")


def file_layout(settings: Settings) -> dict[str, Any]:
    """``settings`` as the mapping ``accelerate config`` writes: its keys, its defaults for the ones not given,
    ``fsdp_config``/``dynamo_config`` sections."""
    distributed = settings.get("distributed_type", "NO")
    layout: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE", "debug": False, "distributed_type": distributed,
        "downcast_bf16": "no", "enable_cpu_affinity": False, "machine_rank": settings.get("machine_rank", 0),
        "main_training_function": "main", "mixed_precision": settings.get("mixed_precision", "no"),
        "num_machines": settings.get("num_machines", 1), "num_processes": settings.get("num_processes", 1),
        "rdzv_backend": settings.get("rdzv_backend", "static"), "same_network": True, "tpu_env": [],
        "tpu_use_cluster": False, "tpu_use_sudo": False, "use_cpu": settings.get("use_cpu", False),
    }
    for key in ("gpu_ids", "main_process_ip", "main_process_port"):
        if settings.get(key) is not None:
            layout[key] = settings.get(key)
    for section, keys in _SECTIONS.items():
        values = {key: settings.get(key) for key in keys if settings.get(key) is not None}
        if values and _SECTION_RUNS.get(section, distributed) == distributed:
            layout[section] = values
    return layout


def write_config(settings: Settings, path: str | os.PathLike) -> None:
    """Write ``settings`` to ``path`` in ``accelerate config``'s layout (sorted keys, as it writes them), so
    ``accelerate launch --config_file`` reads it too. The file is replaced only once the new one is complete."""
    import yaml

    from framework.io import fs

    text = yaml.safe_dump(file_layout(settings), sort_keys=True)
    fs.write_bytes_atomic(os.fspath(path), text.encode("utf-8"))


def accelerate_default_config_path() -> Path:
    """Where ``accelerate config`` writes by default (``$HF_HOME/accelerate/default_config.yaml``; HF_HOME is
    ``${XDG_CACHE_HOME:-~/.cache}/huggingface`` when unset), read by ``framework launch``, never written."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    home = os.environ.get("HF_HOME") or os.path.join(cache, "huggingface")
    return Path(os.path.expanduser(home), "accelerate", "default_config.yaml")
