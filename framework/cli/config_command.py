"""``framework config``: write an Accelerate launch config, which ``framework launch`` (and ``accelerate launch
--config_file``) read.

Three ways: questions on the terminal, as ``accelerate config`` asks them (no options given; answers are read
from stdin, and where it ends the defaults are taken); options (``--distributed_type MULTI_CPU
--num_processes 2``, the defaults for the rest, no questions); or ``--default``, this machine's config (its
GPUs, else one CPU process), which leaves an existing file alone, as ``accelerate config default`` does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from framework.accelerate.config_keys import CHECKS, DISTRIBUTED_TYPES, DYNAMO_KEYS, FSDP_KEYS, KEYS, TOP_LEVEL
from framework.accelerate.config_values import Refused, choices
from framework.accelerate.utils.environment import default_config_path
from framework.cli.accelerate_config import Settings, write_config
from framework.cli.accelerate_launch import OPTIONS, normalized
from framework.cli.errors import ConfigError

_KEYS = [key for key in (*TOP_LEVEL, *FSDP_KEYS, *DYNAMO_KEYS) if key != "compute_environment"]
_METAVARS = {name: metavar for options in OPTIONS.values() for name, metavar, _ in options if metavar} | {
    "distributed_type": choices(CHECKS["distributed_type"]), "use_cpu": "{true,false}",
    "rdzv_backend": choices(CHECKS["rdzv_backend"]),
    "dynamo_use_fullgraph": "{true,false}", "dynamo_use_dynamic": "{true,false}",
    "dynamo_use_regional_compilation": "{true,false}"}
_KINDS = {"NO": "one process", "MULTI_CPU": "several processes on CPUs (gloo)",
          "MULTI_GPU": "one process per GPU (DDP)", "FSDP": "fully sharded data parallel, on GPUs or CPUs"}


def config_parser() -> argparse.ArgumentParser:
    """``framework config``'s options: the file, --default, and one per key of the config file."""
    parser = argparse.ArgumentParser(
        prog="framework config", allow_abbrev=False, argument_default=argparse.SUPPRESS,
        usage="framework config [--config_file FILE] [--default] [--KEY VALUE ...]",
        description="Write an Accelerate launch config (accelerate config's layout) for `framework launch`. With no "
                    "key options it asks, as `accelerate config` does; with some it takes the defaults for the rest.")
    parser.add_argument("--config_file", metavar="FILE", help=f"where to write (default: {default_config_path()}, "
                        f"which `framework launch` reads when given no options)")
    parser.add_argument("--default", action="store_true", help="this machine's config: one process per GPU, or one "
                        "CPU process; an existing file is left as it is")
    keys = parser.add_argument_group("the config's keys (accelerate config's names; dashes also work)")
    for key in _KEYS:
        keys.add_argument(f"--{key}", metavar=_METAVARS.get(key, "VALUE"))
    return parser


def config_command(argv: Sequence[str]) -> int:
    """Run ``framework config <argv>``; returns the exit code (2 for a value that cannot be written).

    Example::

        framework config --distributed_type MULTI_CPU --num_processes 2 --mixed_precision bf16
    """
    options = vars(config_parser().parse_args([normalized(argument) for argument in argv]))
    path = Path(options.pop("config_file", None) or default_config_path())
    machine_default = options.pop("default", False)
    try:
        given = Settings()
        for key, value in options.items():
            given.set(key, value, f"--{key}")
        if machine_default and path.exists():
            print(f"framework config: {path} exists and is left as it is (--default writes only a new file).")
            return 0
        gpus = _gpu_count()
        if machine_default and gpus > 1 and "num_processes" not in given.values:
            given.set("num_processes", gpus, "--default")  # one process per GPU, as accelerate config default
        asked = given if machine_default or given.values else ask_settings(gpus, Answers())
        settings = completed(asked, gpus)
        _check(settings)
    except ConfigError as error:
        print(f"framework config: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # stopped mid-questions: the old file, if any, stays as it was
        print(f"\nframework config: stopped; {path} is unchanged.", file=sys.stderr)
        return 130
    try:
        write_config(settings, path)
    except OSError as error:
        print(f"framework config: error: cannot write {path}: {error}", file=sys.stderr)
        return 1
    launch = "framework launch" + ("" if path == default_config_path() else f" --config_file {path}")
    print(f"framework config: wrote {path}\nRun a script with it: {launch} train.py")
    return 0


class Answers:
    """Asks on stdout and reads answers from stdin; once stdin ends, every question takes its default."""

    def __init__(self, read: Callable[[str], str] = input) -> None:
        self.read = read
        self.ended = False

    def __call__(self, key: str, question: str, default: Any, check: Callable[[Any], Any] | None = None) -> Any:
        """The answer to ``question`` (checked by ``check``, else by the check of ``key``), or ``default``."""
        check = check or CHECKS[key]
        shown = {True: "yes", False: "no"}[default] if isinstance(default, bool) else default
        while not self.ended:
            try:
                answer = self.read(f"{question} [{'none' if shown is None else shown}]: ").strip()
            except EOFError:
                self.ended = True
                print("\n(stdin has ended: the defaults are taken for the rest)")
                break
            if not sys.stdin.isatty():  # answers piped in: show them, so the transcript reads as a dialogue
                print(answer)
            if not answer:
                break
            try:
                return check(answer)
            except Refused as refused:
                print(f"  {refused}")
        return default if default is None else check(default)


def ask_settings(gpus: int, ask: Answers) -> Settings:
    """The settings the questions give (``accelerate config``'s, for this launcher: no TPU, DeepSpeed ...)."""
    kinds = "\n".join(f"  {index}  {name:<9} {text}" for index, (name, text) in enumerate(_KINDS.items()))
    answers: dict[str, Any] = {}
    distributed = answers["distributed_type"] = ask(
        "distributed_type", f"Which kind of run?\n{kinds}\nAnswer with a number or a name",
        "MULTI_GPU" if gpus > 1 else "NO", _kind)
    if distributed == "NO":
        answers["use_cpu"] = ask("use_cpu", "Run on the CPU even where there is a GPU?", gpus == 0)
    else:
        machines = answers["num_machines"] = ask("num_machines", "How many machines?", 1)
        if machines > 1:
            answers["machine_rank"] = ask("machine_rank", f"The rank of this machine (0 to {machines - 1})?", 0)
            answers["main_process_ip"] = ask("main_process_ip", "The IP address of machine 0?", None)
            answers["main_process_port"] = ask("main_process_port", "The port machine 0 listens on?", 29500)
        if distributed == "FSDP":
            answers["use_cpu"] = ask("use_cpu", "Run on CPU ranks (gloo) even where there are GPUs?", False)
        on_gpus = distributed in ("MULTI_GPU", "FSDP") and not answers.get("use_cpu")
        answers["num_processes"] = ask("num_processes", "How many processes in all, on all machines?",
                                       (gpus if on_gpus and gpus else 2) * machines)
        if on_gpus:
            answers["gpu_ids"] = ask("gpu_ids", "Which GPUs of this machine (by id, comma-separated)?", "all")
    if distributed == "FSDP":
        answers.update(_ask_fsdp(ask))
    answers["mixed_precision"] = ask("mixed_precision", "Mixed precision (no, fp16, bf16)?", "no")
    settings = Settings()
    for key, value in answers.items():
        if value is not None:
            settings.set(key, value, key)
    return settings


def _ask_fsdp(ask: Answers) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    version = answers["fsdp_version"] = ask("fsdp_version", "FSDP version (1 or 2)?", 2)
    if version == 2:
        answers["fsdp_reshard_after_forward"] = ask(
            "fsdp_reshard_after_forward", "Reshard parameters after the forward pass (ZeRO-3; no: ZeRO-2)?", True)
    else:  # accelerate config writes version 1's strategy under this key
        answers["fsdp_reshard_after_forward"] = ask(
            "fsdp_reshard_after_forward", "Sharding strategy (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD)?", "FULL_SHARD")
    answers["fsdp_offload_params"] = ask("fsdp_offload_params", "Offload parameters and gradients to the CPU?", False)
    policy = answers["fsdp_auto_wrap_policy"] = ask(
        "fsdp_auto_wrap_policy", "Auto wrap policy (TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP)?",
        "TRANSFORMER_BASED_WRAP")
    if policy == "TRANSFORMER_BASED_WRAP":
        answers["fsdp_transformer_layer_cls_to_wrap"] = ask(
            "fsdp_transformer_layer_cls_to_wrap", "Layer classes to wrap, comma-separated (none: the model's "
            "_no_split_modules)?", None)
    elif policy == "SIZE_BASED_WRAP":
        answers["fsdp_min_num_params"] = ask("fsdp_min_num_params", "Fewest parameters in a wrapped module?",
                                             KEYS["fsdp_min_num_params"].default)
    state_dicts = "SHARDED_STATE_DICT, FULL_STATE_DICT" + (", LOCAL_STATE_DICT" if version == 1 else "")
    answers["fsdp_state_dict_type"] = ask("fsdp_state_dict_type", f"State dict type ({state_dicts})?",
                                          "SHARDED_STATE_DICT" if version == 2 else "FULL_STATE_DICT")
    answers["fsdp_activation_checkpointing"] = ask("fsdp_activation_checkpointing", "Activation checkpointing?",
                                                   False)
    return answers


def _kind(answer: str) -> str:
    if answer.isdigit() and int(answer) < len(DISTRIBUTED_TYPES):
        return DISTRIBUTED_TYPES[int(answer)]
    return CHECKS["distributed_type"](answer)


def completed(given: Settings, gpus: int) -> Settings:
    """``given`` with ``accelerate config``'s defaults for what it leaves out (the kind of run from the number of
    processes when not given; FSDP's defaults are its default answers)."""
    processes = given.get("num_processes", 1)
    machines = given.get("num_machines", 1)
    distributed = given.get("distributed_type") or (
        "FSDP" if any(key in FSDP_KEYS for key in given.values) else
        "NO" if processes == 1 and machines == 1 else
        "MULTI_CPU" if given.get("use_cpu") or gpus == 0 else "MULTI_GPU")
    use_cpu = given.get("use_cpu", distributed == "MULTI_CPU" or (distributed == "NO" and gpus == 0))
    on_gpus = distributed in ("MULTI_GPU", "FSDP") and not use_cpu and gpus > 0
    defaults: dict[str, Any] = {"distributed_type": distributed, "use_cpu": use_cpu, "mixed_precision": "no",
                                "num_machines": 1, "machine_rank": 0,
                                "num_processes": 1 if distributed == "NO" else (gpus if on_gpus else 2) * machines}
    if distributed == "FSDP":
        version = given.get("fsdp_version", 2)
        defaults.update(fsdp_version=version, fsdp_offload_params=False, fsdp_auto_wrap_policy="TRANSFORMER_BASED_WRAP",
                        fsdp_cpu_ram_efficient_loading=True, fsdp_activation_checkpointing=False)
        if version == 2:
            defaults.update(fsdp_reshard_after_forward=True, fsdp_state_dict_type="SHARDED_STATE_DICT")
        else:
            defaults.update(fsdp_reshard_after_forward="FULL_SHARD", fsdp_state_dict_type="FULL_STATE_DICT",
                            fsdp_backward_prefetch="BACKWARD_PRE", fsdp_forward_prefetch=False,
                            fsdp_use_orig_params=True, fsdp_sync_module_states=True)
    base = Settings()
    for key, value in defaults.items():
        base.set(key, value, key)
    return given.over(base)


def _check(settings: Settings) -> None:
    """Refuse a config ``framework launch`` could not run, or ``accelerate launch`` would run otherwise."""
    from framework.cli.launch_plan import launch_plan

    distributed, processes = settings.get("distributed_type"), settings.get("num_processes")
    if distributed == "NO" and (processes > 1 or settings.get("num_machines") > 1):
        raise settings.error("num_processes", f"{processes} processes on {settings.get('num_machines')} machine(s) "
                             f"with distributed_type NO (one process); use MULTI_CPU, MULTI_GPU or FSDP.")
    if distributed != "FSDP" and any(key in FSDP_KEYS for key in settings.values):
        key = next(key for key in settings.values if key in FSDP_KEYS)
        raise settings.error(key, f"FSDP is not in use (distributed_type {distributed}); use distributed_type FSDP.")
    launch_plan(settings, gpus=0)  # what it refuses, framework launch would refuse (on any machine: no GPU count)


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
