"""A run's configuration gathered from its sources: YAML files and ``--dotted.key=value`` flags.

Each source is read into one nested tree of plain values; later sources override earlier ones, and
every value remembers where it came from (``file.yaml:12`` or the flag), so an error about it can say
where to look. Sections (``trainer:``, ``model:``, a ``class_path`` section and its ``init_args``)
merge key by key; any other value, a list or a mapping argument included, is replaced whole.

Values given as flags stay text (:class:`FlagText`) until they are typed against the signature they
are for, because ``--model.init_args.name=007`` means the string ``"007"`` to a ``str`` argument and
the number 7 to an ``int`` one.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from framework.cli import yaml_files
from framework.cli.errors import ConfigError, Key
from framework.cli.short_names import short_names

# The arguments given for a section's earlier class, kept aside when a later source names another class:
# those the new class takes still apply (as in LightningCLI), the others are dropped.
CARRIED = "<init_args of the class named before>"
CLASS_KEYS = ("class_path", "init_args", CARRIED)
_CLASS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_MISSING = object()


class FlagText(str):
    """A value typed on the command line, kept as text until the argument it is for gives it a type."""


def is_class_node(value: Any) -> bool:
    """A ``{class_path: ..., init_args: ...}`` section."""
    return isinstance(value, dict) and "class_path" in value


def names_a_class(text: Any) -> bool:
    """``mypackage.models.Net`` or a built-in's bare name (``ModelCheckpoint``), not ``true``, ``ddp`` or ``3``."""
    return (isinstance(text, str) and _CLASS_NAME.fullmatch(text) is not None
            and isinstance(yaml_files.parse_text(text), str) and ("." in text or text in short_names()))


class Config:
    """A nested tree of values with the source (``file:line`` or flag) of each value in it.

    Example::

        config = read_yaml("base.yaml")
        config.set_flag("--trainer.max_epochs", "3")
        config.get(("trainer", "max_epochs"))   # FlagText("3")
        config.origin(("trainer", "max_epochs"))   # "--trainer.max_epochs"
    """

    def __init__(self, tree: dict | None = None, origins: dict[Key, str] | None = None) -> None:
        self.tree: dict = tree if tree is not None else {}
        self.origins: dict[Key, str] = origins if origins is not None else {}

    def get(self, key: Key, default: Any = None) -> Any:
        """The value at ``key``, or ``default`` where there is none."""
        node: Any = self.tree
        for part in key:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                node = node[part]
            else:
                return default
        return node

    def origin(self, key: Key) -> str | None:
        """Where the value at ``key`` (or the nearest section holding it) was given."""
        for end in range(len(key), 0, -1):
            if key[:end] in self.origins:
                return self.origins[key[:end]]
        return None

    def merge(self, other: Config, at: Key = ()) -> None:
        """Override this tree with ``other``'s values, placed at ``at``."""
        update, origins = copy.deepcopy(other.tree), dict(other.origins)
        self._merge_into(self._section(at), update, origins, at, ())

    def set_flag(self, flag: str, value: str) -> None:
        """Apply ``--a.b.c`` with its text ``value``; ``--model=pkg.Net`` names the section's class."""
        key = tuple(flag[2:].split("."))
        if any(not part for part in key):
            raise ConfigError(f"{flag}: a flag is --section.key=value, with no empty part between the dots.")
        if "[" in flag:
            example = "--trainer.callbacks='[{class_path: EarlyStopping, init_args: {monitor: val_loss}}]'"
            raise ConfigError(f"{flag}: a flag names a key, not an item of a list; give the whole list, e.g. "
                              f"{example}.")
        existing = {key[:end] for end in range(1, len(key)) if self.get(key[:end], _MISSING) is not _MISSING}
        text = FlagText(value)
        if key[-1] not in CLASS_KEYS and self._sets_the_class(key, text):
            update, where = {"class_path": text}, key
        else:
            update, where = {key[-1]: text}, key[:-1]
        self.merge(Config(update, {(name,): flag for name in update}), at=where)
        for end in range(1, len(key)):
            if key[:end] not in existing:  # a section this flag opened: errors about it name the flag
                self.origins[key[:end]] = flag

    def _sets_the_class(self, key: Key, text: str) -> bool:
        """``--model=pkg.Net`` and ``--trainer.logger=CSVLogger`` (over a class_path section) name a class;
        ``--trainer.logger=false`` and ``--data=null`` replace the section."""
        if len(key) == 1 and key[0] in ("model", "data"):
            return yaml_files.parse_text(text) is not None
        current = self.get(key)
        return (is_class_node(current) or isinstance(current, str)) and names_a_class(text)

    def _section(self, at: Key) -> dict:
        node = self.tree
        for depth, part in enumerate(at):
            child = node.get(part)
            if isinstance(child, str) and names_a_class(child):  # --trainer.logger=CSVLogger then .save_dir=x
                child = node[part] = {"class_path": child}
                if at[: depth + 1] in self.origins:
                    self.origins[at[: depth + 1] + ("class_path",)] = self.origins[at[: depth + 1]]
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        return node

    def _merge_into(self, base: dict, update: dict, origins: dict[Key, str], at: Key, rel: Key) -> None:
        if is_class_node(base) or is_class_node(update):
            _gather_init_args(base, self.origins, at)
            _gather_init_args(update, origins, rel)
            old, new = base.get("class_path"), update.get("class_path")
            if old is not None and new is not None and new != old:
                self._carry_init_args(base, at)
        for name, value in update.items():
            here = at + (name,)
            if isinstance(value, dict) and isinstance(base.get(name), dict) and _merges(at, name, base[name], value):
                if rel + (name,) in origins:
                    self.origins[here] = origins[rel + (name,)]
                self._merge_into(base[name], value, origins, here, rel + (name,))
                continue
            _drop_origins(self.origins, here)
            base[name] = value
            for key, source in origins.items():
                if key[: len(rel) + 1] == rel + (name,):
                    self.origins[at + key[len(rel):]] = source

    def _carry_init_args(self, node: dict, at: Key) -> None:
        """Another class named: set the old class's arguments aside for the new one to take what it can."""
        carried = {**node.get(CARRIED, {}), **node.pop("init_args", {})}
        if carried:
            node[CARRIED] = carried
        for key in [key for key in self.origins if key[: len(at) + 1] == at + ("init_args",)]:
            self.origins[at + (CARRIED,) + key[len(at) + 1:]] = self.origins.pop(key)


def read_yaml(path: str | Path) -> Config:
    """One YAML config file as a :class:`Config` whose values know their ``file:line``.

    Bad YAML, tags, a top level that is not a mapping, a key that is not a name and a key given twice
    in one mapping are errors naming the file and line.
    """
    return Config(*yaml_files.load(path))


def _merges(at: Key, name: Any, old: dict, new: dict) -> bool:
    """Whether two mappings merge key by key (sections) or the newer replaces the older (argument values)."""
    return not at or name in ("init_args", CARRIED) or is_class_node(old) or is_class_node(new)


def _gather_init_args(node: dict, origins: dict[Key, str], at: Key) -> None:
    """``model: {class_path: X, lr: 0.1}`` and ``--model.lr`` are short for ``model.init_args.lr``."""
    if "init_args" in node and node["init_args"] is None:  # ``init_args:`` left empty
        node["init_args"] = {}
    loose = [name for name in node if name not in CLASS_KEYS]
    if not loose:
        return
    init_args = node.setdefault("init_args", {})
    for name in loose:
        init_args[name] = node.pop(name)
        for key in [key for key in origins if key[: len(at) + 1] == at + (name,)]:
            origins[at + ("init_args",) + key[len(at):]] = origins.pop(key)


def _drop_origins(origins: dict[Key, str], prefix: Key) -> None:
    for key in [key for key in origins if key[: len(prefix)] == prefix]:
        del origins[key]
