"""``framework fit|validate|test|predict``: a Trainer run described by YAML configs and flags.

The layout is LightningCLI's::

    seed_everything: 0
    trainer:
      max_epochs: 3
      callbacks:
        - class_path: framework.callbacks.EarlyStopping
          init_args: {monitor: val_loss}
    model:
      class_path: mypackage.models.Net
      init_args: {lr: 0.01}
    data:
      class_path: mypackage.data.Digits
    ckpt_path: null

``--config`` files and ``--section.key=value`` flags apply in the order given, each overriding the
ones before. The resolved config (every argument, defaults filled in) is what ``--print_config``
prints and what the run writes to ``<log dir>/config.yaml``.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from framework.callbacks.base import Callback
from framework.cli.build import instantiate, make
from framework.cli.class_names import names_a_class
from framework.cli.classes import check_value, nearest_keys, require_subclass, resolve_arguments, resolve_class_node
from framework.cli.coerce import mismatch_error
from framework.cli.config import Config, FlagText, is_class_node, read_yaml
from framework.cli.errors import ConfigError, placed
from framework.cli.save_config import SaveConfig
from framework.cli.signatures import annotations_of, parameters
from framework.cli.yaml_files import dump, parse_text
from framework.datamodule import DataModule
from framework.errors import CheckpointError, MisconfigurationError
from framework.io import fs
from framework.loggers.base import Logger
from framework.module import Module
from framework.seed import seed_everything
from framework.strategies.base import Strategy
from framework.trainer import Trainer
from framework.trainer.arguments import environment_settings
from framework.version import __version__

SUBCOMMANDS = ("fit", "validate", "test", "predict")
# The Trainer method's arguments the command line does not give: it makes the Module and DataModule itself.
_MADE_BY_THE_CLI = ("self", "model", "train_dataloaders", "val_dataloaders", "dataloaders", "datamodule")
# Trainer arguments annotated Any (they take many forms) whose class_path sections must name these.
_TRAINER_CLASS_ARGUMENTS = {
    "callbacks": Callback | list[Callback] | None,
    "logger": Logger | list[Logger] | bool | None,
    "strategy": str | Strategy,
}
_LIGHTNING_CLI_ONLY = {
    "optimizer": "The Module's configure_optimizers makes the optimizer; give its settings (such as lr) as "
                 "model arguments.",
    "lr_scheduler": "The Module's configure_optimizers makes the scheduler; give its settings as model arguments.",
}


@dataclass
class CommandRun:
    """What ``framework.cli.run`` made and what the Trainer method returned.

    :param subcommand: the subcommand run (``"fit"``, ``"validate"``, ``"test"``, ``"predict"``).
    :param config: the configuration the objects were built from, every source merged.
    :param trainer: the Trainer built from it.
    :param model: the Module built from it.
    :param datamodule: the DataModule built from it; None where the configuration names none.
    :param result: what the Trainer method returned (``validate``'s metrics, ``predict``'s predictions, None
        for ``fit``).
    """

    subcommand: str
    config: dict
    trainer: Trainer
    model: Module
    datamodule: DataModule | None
    result: Any = field(default=None)


@dataclass
class _Request:
    subcommand: str
    sources: Config
    print_config: bool = False
    help: bool = False


def run(ModelClass: type[Module] | None = None, DataModuleClass: type[DataModule] | None = None,  # noqa: N803
        args: Sequence[str] | None = None, *, overwrite_config: bool = False) -> CommandRun | None:
    """Run ``fit``/``validate``/``test``/``predict`` as the arguments say, the way ``framework fit`` does.

    With ``ModelClass`` (or ``DataModuleClass``) given, the config's ``model:`` (``data:``) section holds
    that class's arguments directly (``--model.lr=0.01``); a ``class_path`` there may still name a
    subclass. Returns None after ``--help`` or ``--print_config``.

    ``args`` (a list of strings) are the command line's words after the script's name. A bad config
    then raises :class:`~framework.cli.errors.ConfigError`, naming the key, the source and the fix.
    Without ``args``, ``sys.argv[1:]`` is read and such an error is printed and ends the script with
    exit status 2, as argparse does.

    Example, ``train.py`` run as ``python train.py fit --config cfg.yaml --trainer.max_epochs=3``::

        from framework.cli import run
        from mypackage import Net, Digits

        if __name__ == "__main__":
            run(Net, Digits)

    :raises SystemExit: with status 2, where ``args`` is ``None`` and the command line (or a config it names) is
        wrong, or a checkpoint cannot be used; the message is printed first.
    """
    if args is None:  # a script's own command line: errors end the script as argparse's do
        try:
            return run(ModelClass, DataModuleClass, sys.argv[1:], overwrite_config=overwrite_config)
        except (MisconfigurationError, CheckpointError) as error:
            print(f"{sys.argv[0]}: error: {error}", file=sys.stderr)
            raise SystemExit(2) from None
    request = parse_arguments(list(args))
    if request.help:
        print(usage(request.subcommand))
        return None
    resolved = resolve(request.sources, request.subcommand, ModelClass, DataModuleClass)
    if request.print_config:
        print(config_text(resolved), end="")
        return None
    return _execute(request.subcommand, resolved, ModelClass, DataModuleClass, overwrite_config)


def parse_arguments(argv: list[str]) -> _Request:
    """The subcommand, then ``--config`` files and ``--key=value`` flags merged in order."""
    if not argv:
        raise ConfigError(f"a subcommand comes first: {', '.join(SUBCOMMANDS)}.\n\n{usage(None)}")
    if "-h" in argv or "--help" in argv:  # help wins over whatever else is there, as with argparse
        return _Request(argv[0] if argv[0] in SUBCOMMANDS else "", Config(), help=True)
    subcommand, rest = argv[0], argv[1:]
    if subcommand not in SUBCOMMANDS:
        raise ConfigError(f"unknown subcommand {subcommand!r}. {nearest_keys(subcommand, list(SUBCOMMANDS))}")
    request = _Request(subcommand, Config())
    position = 0
    while position < len(rest):
        token = rest[position]
        position += 1
        if token in ("--print_config", "--print-config"):
            request.print_config = True
        elif token.startswith(("--print_config=", "--print-config=")):
            raise ConfigError(f"{token}: --print_config takes no value; it prints the whole resolved config.")
        elif not token.startswith("--") or token == "--":
            raise ConfigError(f"unexpected argument {token!r}: options are --config FILE and --section.key=VALUE.")
        else:
            flag, equals, value = token.partition("=")
            if not equals:
                if position == len(rest) or rest[position].startswith("--"):
                    raise ConfigError(f"{flag} needs a value: {flag}=VALUE or {flag} VALUE.")
                value, position = rest[position], position + 1
            if flag == "--config":
                request.sources.merge(read_yaml(value))
            else:
                request.sources.set_flag(flag, value)
    return request


def resolve(sources: Config, subcommand: str, ModelClass: type | None = None,  # noqa: N803
            DataModuleClass: type | None = None) -> dict:  # noqa: N803
    """The whole config as plain data: every section checked against its signature, defaults filled in."""
    tree = sources.tree
    method = _method_parameters(subcommand)
    valid = ["seed_everything", "trainer", "model", "data", *method]
    for name in tree:
        if name not in valid:
            raise _unknown_section(name, subcommand, valid, sources)
    resolved = {"seed_everything": check_value(tree.get("seed_everything", True), bool | int, ("seed_everything",),
                                               sources)}
    resolved["trainer"] = _resolve_trainer(tree.get("trainer"), sources)
    resolved["model"] = _resolve_section("model", tree.get("model"), Module, ModelClass, sources, required=True)
    resolved["data"] = _resolve_section("data", tree.get("data"), DataModule, DataModuleClass, sources,
                                        required=False)
    annotations = {name: parameter.annotation for name, parameter in method.items()}
    resolved.update(resolve_arguments({name: tree[name] for name in method if name in tree}, method, annotations,
                                      (), sources, f"Trainer.{subcommand}"))
    _check_checkpoint_exists(resolved.get("ckpt_path"), sources)
    return resolved


def config_text(resolved: dict) -> str:
    """The resolved config as the YAML ``--print_config`` prints and ``config.yaml`` holds."""
    return f"# framework=={__version__}\n" + dump(resolved)


def usage(subcommand: str | None) -> str:
    """The help for ``framework <subcommand> --help``."""
    name = subcommand or "|".join(SUBCOMMANDS)
    method = ", ".join(_method_parameters(subcommand)) if subcommand else "ckpt_path, ..."
    return (f"usage: framework {name} [--config FILE ...] [--section.key=VALUE ...] [--print_config]\n\n"
            f"Sources apply in order, later ones overriding earlier ones.\n"
            f"  --config FILE        a YAML config (sections below); give several to layer them\n"
            f"  --trainer.KEY=VALUE  a Trainer argument, e.g. --trainer.max_epochs=3\n"
            f"  --model.KEY=VALUE    the Module's argument, e.g. --model.init_args.lr=0.01 (or --model.lr=0.01)\n"
            f"  --model=CLASS        the Module's class by import path (mypackage.models.Net)\n"
            f"  --data.KEY=VALUE     the DataModule's argument; --data=CLASS its class\n"
            f"  --print_config       print the resolved config (every argument, defaults filled in) and stop\n\n"
            f"sections: seed_everything (true, false or a seed), trainer, model, data, {method}")


def _execute(subcommand: str, resolved: dict, ModelClass: type | None,  # noqa: N803
             DataModuleClass: type | None, overwrite_config: bool) -> CommandRun:  # noqa: N803
    saved = dict(resolved)
    if resolved["seed_everything"] is not False:
        seed = None if resolved["seed_everything"] is True else resolved["seed_everything"]
        saved["seed_everything"] = seed_everything(seed)  # the seed itself, so the saved config repeats the run
    _, annotations = _trainer_parameters()
    trainer_arguments = {name: instantiate(value, annotations[name]) for name, value in resolved["trainer"].items()}
    callbacks = trainer_arguments.get("callbacks")
    callbacks = [] if callbacks is None else list(callbacks) if isinstance(callbacks, list) else [callbacks]
    trainer_arguments["callbacks"] = [*callbacks, SaveConfig(config_text(saved), overwrite=overwrite_config)]
    trainer = Trainer(**trainer_arguments)
    model = _instantiate_section(resolved["model"], ModelClass)
    datamodule = _instantiate_section(resolved["data"], DataModuleClass)
    method_arguments = {name: resolved[name] for name in _method_parameters(subcommand)}
    result = getattr(trainer, subcommand)(model, datamodule=datamodule, **method_arguments)
    return CommandRun(subcommand, saved, trainer, model, datamodule, result)


def _instantiate_section(value: Any, fixed: type | None) -> Any:
    if value is None or is_class_node(value):
        return instantiate(value)
    return make(fixed, value)


def _resolve_trainer(given: Any, sources: Config) -> dict:
    if isinstance(given, FlagText):  # --trainer='{max_epochs: 2}'
        given = parse_text(given)
    if given is None:
        given = {}
    if not isinstance(given, dict) or is_class_node(given):
        where = placed(("trainer",), sources.origin(("trainer",)))
        raise ConfigError(f"{where}: the trainer section holds the Trainer's arguments by name (max_epochs: 3, "
                          f"...), not a class; got {given!r}.")
    named, annotations = _trainer_parameters()
    # The environment's Trainer defaults (PL_TRAINER_MAX_EPOCHS=3) sit under the config files and flags,
    # and are written into the resolved config, so the saved config.yaml repeats the run without them.
    environment = {name: (value, f"environment variable {variable}")
                   for name, (value, variable) in environment_settings(list(named)).items()}
    return resolve_arguments(given, named, annotations, ("trainer",), sources, "Trainer", carried=environment)


def _check_checkpoint_exists(ckpt_path: Any, sources: Config) -> None:
    if isinstance(ckpt_path, str) and ckpt_path not in ("last", "best") and not fs.exists(ckpt_path):
        raise ConfigError(f"{placed(('ckpt_path',), sources.origin(('ckpt_path',)))}: no checkpoint at {ckpt_path!r}. "
                          f"Give a checkpoint file (or a sharded checkpoint's folder), 'last' or 'best'.")


def _trainer_parameters() -> tuple[dict[str, inspect.Parameter], dict[str, Any]]:
    named, annotations, _ = parameters(Trainer)
    return named, {**annotations, **_TRAINER_CLASS_ARGUMENTS}


def _resolve_section(name: str, given: Any, base: type, fixed: type | None, sources: Config,
                     required: bool) -> dict | None:
    """``model:`` / ``data:``: a class_path section naming a ``base`` subclass, or the fixed class's arguments."""
    key = (name,)
    if isinstance(given, FlagText):
        given = parse_text(given)
    if names_a_class(given) or (isinstance(given, str) and fixed is None):
        given = {"class_path": given}  # ``model: mypackage.models.Net``
    if fixed is not None:
        require_subclass(fixed, base, key, "the class given to framework.cli.run")
        if is_class_node(given):
            return resolve_class_node(given, fixed, key, sources)
        if given is not None and not isinstance(given, dict):
            raise mismatch_error(key, given, dict, sources.origin(key))
        named, annotations, takes_more = parameters(fixed)
        return resolve_arguments(given or {}, named, annotations, key, sources, fixed.__name__,
                                 takes_more=takes_more, carried=sources.carried.get(key))
    if given is None:
        if not required:
            return None
        raise ConfigError(f"no {name} given: name the {base.__name__} to train in a config file (model: "
                          f"{{class_path: mypackage.models.Net}}) or with --{name}=mypackage.models.Net.")
    if not is_class_node(given):
        raise ConfigError(f"{placed(key, sources.origin(key))}: the {name} section names a {base.__name__} subclass "
                          f"with class_path (and its arguments under init_args); {_what_it_has(given)}.")
    return resolve_class_node(given, base, key, sources)


def _method_parameters(subcommand: str) -> dict[str, inspect.Parameter]:
    method = getattr(Trainer, subcommand)
    signature = inspect.signature(method)
    hints = annotations_of(method, dict(signature.parameters))
    return {name: parameter.replace(annotation=hints[name]) for name, parameter in signature.parameters.items()
            if name not in _MADE_BY_THE_CLI}


def _unknown_section(name: str, subcommand: str, valid: list[str], sources: Config) -> ConfigError:
    where = placed((name,), sources.origin((name,)))
    if name in _LIGHTNING_CLI_ONLY:
        return ConfigError(f"{where}: framework's command line takes no {name} section. {_LIGHTNING_CLI_ONLY[name]}")
    if name in SUBCOMMANDS:
        return ConfigError(f"{where}: a config for `framework {subcommand}` holds the sections themselves "
                           f"(trainer:, model:, ...) at the top, not under {name}:.")
    return ConfigError(f"{where}: unknown section for `framework {subcommand}`. {nearest_keys(name, valid)}")


def _what_it_has(given: Any) -> str:
    if given == {}:
        return "it is empty"
    return f"it has {', '.join(map(str, given)) if isinstance(given, dict) else repr(given)} but no class_path"
