"""``framework launch`` in Accelerate's form: ``accelerate launch``'s options and config files, run as a
torchrun launch (:mod:`framework.cli.launch_plan`).

Which form a command line is, is decided by its options before the script: one of Accelerate's (``--num_processes``,
``--config_file``, ``--cpu`` ...) makes it Accelerate's; one of torchrun's (``--nproc-per-node`` ...) keeps
torchrun's; the two do not mix. With neither, the default config file is used where there is one
(``framework config``'s, then ``accelerate config``'s), and torchrun's form otherwise. Options are spelled
with underscores or dashes (``--num-processes``), as Accelerate accepts both.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import TextIO

from framework.accelerate.config_keys import CHECKS, DEEPSPEED_KEYS, FSDP_KEYS
from framework.accelerate.config_values import SHARDING, choices
from framework.accelerate.utils.environment import default_config_path
from framework.cli.accelerate_config import Settings, accelerate_default_config_path, read_config
from framework.cli.errors import ConfigError

_BOOL = "{true,false}"
# The options by help section: (name, metavar (None: a switch, no value), help). Each option that takes a value
# is a key of the config file (or a launcher-only key, section "launch" in config_keys), checked as the file's
# value would be.
OPTIONS = {
    "where the ranks run": (
        ("cpu", None, "CPU ranks (gloo), even where there are GPUs"),
        ("multi_gpu", None, "one rank per GPU (DDP); CPU ranks where there is no GPU"),
        ("num_processes", "N", "ranks in all, on all machines (default: one per GPU; 1 on the CPU)"),
        ("num_machines", "N", "machines the ranks are spread over (default 1)"),
        ("machine_rank", "RANK", "this machine's rank, from 0"),
        ("main_process_ip", "ADDRESS", "the address of machine 0 (needed on several machines)"),
        ("main_process_port", "PORT", "the port machine 0 listens on (default 29500; on one machine a free one)"),
        ("gpu_ids", "IDS", "the GPUs of this machine to use, comma-separated (default: all)"),
        ("num_cpu_threads_per_process", "N", "OMP_NUM_THREADS (default: each rank's share of the cores)"),
    ),
    "what Accelerator() is given": (
        ("mixed_precision", choices(CHECKS["mixed_precision"]), "mixed precision (default no)"),
        ("gradient_accumulation_steps", "K", "batches per optimizer step"),
        ("dynamo_backend", "BACKEND", "torch.compile's backend (no, inductor, eager, aot_eager ...)"),
        ("dynamo_mode", "MODE", "torch.compile's mode (default, reduce-overhead, max-autotune)"),
        ("dynamo_use_fullgraph", None, "torch.compile(fullgraph=True)"),
        ("dynamo_use_dynamic", None, "torch.compile(dynamic=True)"),
        ("dynamo_use_regional_compilation", None, "compile each repeated block once"),
    ),
    "FSDP (fully sharded data parallel, also on CPU ranks)": (
        ("use_fsdp", None, "shard with FSDP, set by the options below (default: Accelerate's)"),
        ("fsdp_version", "{1,2}", "default 1, as Accelerate's"),
        ("fsdp_reshard_after_forward", _BOOL, "version 2: true (ZeRO-3) or false (ZeRO-2)"),
        ("fsdp_sharding_strategy", "{" + ",".join(SHARDING) + "}",
         "version 1's strategy"),
        ("fsdp_offload_params", _BOOL, "keep parameters and gradients on the CPU"),
        ("fsdp_auto_wrap_policy", choices(CHECKS["fsdp_auto_wrap_policy"]), None),
        ("fsdp_transformer_layer_cls_to_wrap", "CLASSES", "layer class names, comma-separated"),
        ("fsdp_min_num_params", "N", "SIZE_BASED_WRAP's fewest parameters per wrapped module"),
        ("fsdp_state_dict_type", "{SHARDED_STATE_DICT,FULL_STATE_DICT}", None),
        ("fsdp_backward_prefetch", choices(CHECKS["fsdp_backward_prefetch"]), None),
        ("fsdp_forward_prefetch", _BOOL, None),
        ("fsdp_use_orig_params", _BOOL, None),
        ("fsdp_cpu_ram_efficient_loading", _BOOL, None),
        ("fsdp_sync_module_states", _BOOL, None),
        ("fsdp_activation_checkpointing", _BOOL, None),
        ("fsdp_activation_checkpointing_offload", _BOOL, None),
    ),
    "DeepSpeed (its engine: the deepspeed extra)": (
        ("use_deepspeed", None, "train on DeepSpeed's engine, set by the options below or a DeepSpeed config"),
        ("deepspeed_config_file", "FILE", "a DeepSpeed JSON config (its \"auto\" values filled as Accelerate does)"),
        ("zero_stage", "{0,1,2,3}", "the ZeRO stage (default 2)"),
        ("offload_optimizer_device", "{none,cpu,nvme}", "where the optimizer state lives (default none)"),
        ("offload_param_device", "{none,cpu,nvme}", "where the parameters live, stage 3 (default none)"),
        ("offload_optimizer_nvme_path", "DIR", "the NVMe directory for the optimizer state"),
        ("offload_param_nvme_path", "DIR", "the NVMe directory for the parameters"),
        ("gradient_clipping", "NORM", "the gradient norm to clip to (default: 1.0, as Accelerate's \"auto\")"),
        ("zero3_init_flag", _BOOL, "accepted; the model is partitioned when prepared"),
        ("zero3_save_16bit_model", _BOOL, "stage3_gather_16bit_weights_on_model_save"),
        ("deepspeed_moe_layer_cls_names", "CLASSES", "accepted; not used"),
        ("deepspeed_multinode_launcher", "{standard}", "torchrun starts the ranks on every machine"),
    ),
    "how the script runs": (
        ("module", None, "run it as a module, as python -m does"),
        ("no_python", None, "run it as a program, not with python"),
        ("max_restarts", "N", "these five are torchrun's options, passed on"),
        ("monitor_interval", "SECONDS", None),
        ("log_dir", "DIR", None),
        ("tee", "STREAMS", None),
        ("role", "ROLE", None),
    ),
}
PASSED_ON = ("max_restarts", "monitor_interval", "log_dir", "tee", "role")  # torchrun's, taken by Accelerate too
_SWITCH_SETTINGS = {"cpu": ("use_cpu", True), "multi_gpu": ("distributed_type", "MULTI_GPU"),
                    "use_fsdp": ("distributed_type", "FSDP"), "use_deepspeed": ("distributed_type", "DEEPSPEED")}
_KINDS = ("multi_gpu", "use_fsdp", "use_deepspeed")  # switches that each name the kind of run


@dataclass
class Translation:
    """An Accelerate-form command line as torchrun's: its arguments, the environment and what to say first."""

    torchrun_argv: list[str]
    environment: dict[str, str]
    notes: list[str] = field(default_factory=list)


def launch_parser() -> argparse.ArgumentParser:
    """The parser of Accelerate's options (underscore spellings; :func:`normalized` turns dashes into them)."""
    parser = argparse.ArgumentParser(
        prog="framework launch", add_help=False, allow_abbrev=False, argument_default=argparse.SUPPRESS,
        usage="framework launch [Accelerate's options | torchrun's options] script.py [script arguments]")
    parser.add_argument("-h", "--help", action="store_true", help="show this help")
    parser.add_argument("--config_file", metavar="FILE", help=f"an Accelerate config (`framework config` or "
                        f"`accelerate config` writes one); options given here override its values. Default: "
                        f"{default_config_path()}, else {accelerate_default_config_path()}")
    for title, options in OPTIONS.items():
        group = parser.add_argument_group(title)
        for name, metavar, text in options:
            spellings = ["-m", "--module"] if name == "module" else [f"--{name}"]
            if metavar is None:
                group.add_argument(*spellings, action="store_true", help=text)
            else:
                group.add_argument(*spellings, metavar=metavar, help=text or "")
    return parser


def normalized(option: str) -> str:
    """``--num-processes=2`` as ``--num_processes=2``: the name with underscores, the value untouched."""
    if not option.startswith("--"):
        return option
    name, equals, value = option.partition("=")
    return "--" + name[2:].replace("-", "_") + equals + value


def split_options(argv: list[str], flags: set[str]) -> tuple[list[str], int]:
    """The launcher's option names (normalized) and the index of the script: the first argument that is not an
    option or an option's value. ``flags`` are the (normalized) options that take no value."""
    names, index = [], 0
    while index < len(argv) and argv[index].startswith("-") and argv[index] != "-":
        name = normalized(argv[index]).split("=")[0]
        names.append(name)
        takes_value = "=" not in argv[index] and name not in flags
        index += 2 if takes_value else 1
    return names, min(index, len(argv))


def translate(argv: list[str]) -> Translation | None:
    """``argv`` (what follows ``framework launch``) as a torchrun launch, or None when it is torchrun's form.

    Raises :class:`ConfigError` for what cannot be honoured: a refused key or value, a missing file, options
    of both forms.
    """
    names, script_at, ours, torchrun = _classified(argv)
    accelerate_only = [name for name in names if name in ours and name not in torchrun]
    foreign = [name for name in names if name not in ours]
    if accelerate_only and foreign and all(name in torchrun for name in foreign):
        raise ConfigError(f"{foreign[0]} is torchrun's option and {accelerate_only[0]} is Accelerate's: use one "
                          f"form (framework launch --help shows both).")
    if foreign and not accelerate_only:
        return None
    options = launch_parser().parse_args([normalized(option) for option in argv[:script_at]])
    config_file = getattr(options, "config_file", None)
    if config_file is None and not getattr(options, "cpu", False):  # as Accelerate: --cpu skips the default file
        config_file = found_default_config()
    if not accelerate_only and config_file is None:
        return None
    if script_at == len(argv):
        raise ConfigError("no script given: framework launch [options] script.py [script arguments].")
    return _translation(options, config_file, argv[script_at:], implicit=not hasattr(options, "config_file"))


def wants_help(argv: list[str]) -> bool:
    """Whether ``argv`` asks for this help: -h/--help before the script and no torchrun-only option."""
    names, _, ours, _ = _classified(argv)
    return bool({"-h", "--help"} & set(names)) and all(name in ours for name in names)


def _classified(argv: list[str]) -> tuple[list[str], int, set[str], set[str]]:
    """The launcher's option names, the script's index, and Accelerate's and torchrun's option names."""
    from torch.distributed.run import get_args_parser

    ours, torchrun = (_names_of(parser) for parser in (launch_parser(), get_args_parser()))
    names, script_at = split_options(argv, ours[1] | torchrun[1])
    return names, script_at, ours[0], torchrun[0]


def _names_of(parser: argparse.ArgumentParser) -> tuple[set[str], set[str]]:
    """A parser's option names (normalized): all of them, and those that take no value."""
    actions = parser._actions
    return ({normalized(option) for action in actions for option in action.option_strings},
            {normalized(option) for action in actions if action.nargs == 0 for option in action.option_strings})


def _translation(options: argparse.Namespace, config_file: str | None, command: list[str],
                 implicit: bool) -> Translation:
    from framework.cli.launch_plan import launch_plan

    flags = settings_from_flags(options)
    settings, notes = flags, []
    if config_file is not None:
        settings = flags.over(_read(config_file, implicit))
        if implicit:
            notes.append(f"using the config {config_file} (give launcher options, or --config_file, for another).")
    check_fsdp_flags(settings, flags)
    plan = launch_plan(settings, _gpu_count(settings))
    passed = [item for name in PASSED_ON if hasattr(options, name)
              for item in (f"--{name.replace('_', '-')}", getattr(options, name))]
    how = ["-m"] * getattr(options, "module", False) + ["--no-python"] * getattr(options, "no_python", False)
    return Translation([*plan.torchrun_options, *passed, *how, *command], plan.environment, notes + plan.notes)


def _read(config_file: str, implicit: bool) -> Settings:
    try:
        return read_config(config_file)
    except ConfigError as error:
        if not implicit:
            raise
        raise ConfigError(f"{error} ({config_file} is the default config, used when no launcher option is given: "
                          f"--config_file FILE picks another, torchrun's --nproc-per-node N launches without one.)"
                          ) from None


def settings_from_flags(options: argparse.Namespace) -> Settings:
    """The settings the command line gives, checked as a config file's values are."""
    given = vars(options)
    settings = Settings()
    kinds = [f"--{name}" for name in _KINDS if given.get(name)]
    if given.get("cpu") and given.get("multi_gpu"):
        kinds = ["--cpu", "--multi_gpu"]
    if len(kinds) > 1:
        raise ConfigError(f"{kinds[0]} and {kinds[1]} exclude each other: give one (--cpu --use_fsdp runs FSDP on "
                          f"CPU ranks).")
    for name, value in given.items():
        if name in _SWITCH_SETTINGS:
            settings.set(*_SWITCH_SETTINGS[name], f"--{name}")
        elif name in CHECKS:
            settings.set(name, value, f"--{name}")
    return settings


def check_fsdp_flags(settings: Settings, flags: Settings) -> None:
    """Refuse ``--fsdp_*`` flags where FSDP is not in use, and DeepSpeed's where DeepSpeed is not (Accelerate
    ignores them there)."""
    for keys, kind, switch in ((FSDP_KEYS, "FSDP", "--use_fsdp"), (DEEPSPEED_KEYS, "DEEPSPEED", "--use_deepspeed")):
        given = [key for key in flags.values if key in keys and key != "gradient_accumulation_steps"]
        if given and settings.get("distributed_type") != kind:
            raise ConfigError(f"--{given[0]}: {kind} is not in use (distributed_type "
                              f"{settings.get('distributed_type')}); add {switch}.")


def found_default_config() -> str | None:
    """The default config file ``framework launch`` uses when given no launcher options: ``framework config``'s,
    else ``accelerate config``'s; None when neither exists."""
    for path in (default_config_path(), accelerate_default_config_path()):
        if path.is_file():
            return str(path)
    return None


def _gpu_count(settings: Settings) -> int:
    if settings.get("use_cpu") or settings.get("distributed_type") == "MULTI_CPU":
        return 0  # a CPU run never asks torch.cuda
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def help_text() -> str:
    """``framework launch --help``: both forms, Accelerate's options, and where torchrun's are listed."""
    return (f"{launch_parser().format_help()}\n"
            "Two forms. Accelerate's (these options, or a config file) starts the ranks with torchrun and passes\n"
            "the settings in Accelerate's environment variables (ACCELERATE_MIXED_PRECISION, FSDP_* ...):\n"
            "  framework launch --num_processes 2 --mixed_precision bf16 train.py --epochs 3\n"
            "  framework launch --config_file accelerate.yaml train.py\n"
            "  framework launch train.py     (the default config file, when `framework config` wrote one)\n"
            "--cpu --num_processes 2 really starts 2 CPU ranks; a MULTI_GPU or FSDP config runs on CPU ranks\n"
            "(gloo) where there is no GPU. Options may be spelled with dashes (--num-processes).\n\n"
            "torchrun's form (every torchrun option; --standalone on one machine, each rank its share of the\n"
            "cores as OMP_NUM_THREADS):\n"
            "  framework launch --nproc-per-node 2 train.py --epochs 3\n"
            "  framework launch --nnodes 2 --node-rank 0 --master-addr HOST --master-port 29500 train.py\n"
            "torchrun's options: framework launch --nproc-per-node 1 --help\n")



def print_notes(notes: list[str], stream: TextIO) -> None:
    """Say each note once, as the launcher (not the ranks)."""
    for note in notes:
        print(f"framework launch: {note}", file=stream)

