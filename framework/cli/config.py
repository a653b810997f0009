"""A run's configuration gathered from its sources: YAML files and ``--dotted.key=value`` flags.

Each source is read into one nested tree of plain values; later sources override earlier ones, and
every value remembers where it came from (``file.yaml:12`` or the flag), so an error about it can say
where to look. Sections (``trainer:``, ``model:``, a ``class_path`` section and its ``init_args``)
merge key by key; any other value, a list or a mapping argument included, is replaced whole.

A later source may name another class for a ``class_path`` section (``--model=pkg.Wide``); the
arguments given for the earlier class are then kept aside (:attr:`Config.carried`) and those the new
class also takes still apply, as in LightningCLI.

Values given as flags stay text (:class:`FlagText`) until they are typed against the signature they
are for, because ``--model.init_args.name=007`` means the string ``"007"`` to a ``str`` argument and
the number 7 to an ``int`` one.
"""

from __future__ import annotations

import copy
import inspect
from pathlib import Path
from typing import Any

from framework.cli import yaml_files
from framework.cli.class_names import find, names_a_class, short_names
from framework.cli.errors import ConfigError, Key
from framework.cli.signatures import parameters

CLASS_KEYS = ("class_path", "init_args")


class FlagText(str):
    """A value typed on the command line, kept as text until the argument it is for gives it a type."""


def is_class_node(value: Any) -> bool:
    """A ``{class_path: ..., init_args: ...}`` section."""
    return isinstance(value, dict) and "class_path" in value


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
        # per class_path section: the arguments given for the classes it named before, for the one it names
        # now, each as (value, where it was given)
        self.carried: dict[Key, dict[str, tuple[Any, str | None]]] = {}

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
        """Apply ``--a.b.c`` with its text ``value``; ``--model.lr`` is ``model.init_args.lr`` where the
        model section names a class."""
        parts = tuple(flag[2:].split("."))
        if any(not part for part in parts):
            raise ConfigError(f"{flag}: a flag is --section.key=value, with no empty part between the dots.")
        if "[" in flag or any(part.isdigit() for part in parts):
            example = "--trainer.callbacks='[{class_path: EarlyStopping, init_args: {monitor: val_loss}}]'"
            raise ConfigError(f"{flag}: a flag names a key, not an item of a list; give the whole list, e.g. "
                              f"{example}.")
        key = self._path_of(parts)
        opened = [key[:end] for end in range(1, len(key)) if not isinstance(self.get(key[:end]), dict)]
        self.merge(Config({key[-1]: FlagText(value)}, {(key[-1],): flag}), at=key[:-1])
        for section in opened:  # sections this flag opened: errors about them name the flag
            self.origins[section] = flag

    def _path_of(self, parts: Key) -> Key:
        """The tree path a flag's dotted key means: ``init_args`` inserted under each class_path section."""
        path: list = []
        node: Any = self.tree
        for part in parts:
            if is_class_node(_as_section(node, tuple(path))) and part not in CLASS_KEYS:
                path.append("init_args")
                node = _as_section(node, tuple(path[:-1])).get("init_args")
            path.append(part)
            node = node.get(part) if isinstance(node, dict) else None
        return tuple(path)

    def _section(self, at: Key) -> dict:
        node = self.tree
        for depth, part in enumerate(at):
            here = at[: depth + 1]
            child = self._section_from(node.get(part), here)
            if not isinstance(child, dict):
                self._forget(here)  # a value (``logger: false``) that a flag now gives keys to
                child = {}
            node[part] = child
            node = child
        return node

    def _section_from(self, value: Any, key: Key) -> Any:
        """``value`` at ``key`` as a section keys can be added to, where it is one: a class named alone
        (``logger: CSVLogger``, which keeps its source) or a flag's mapping."""
        section = _as_section(_parsed_mapping(value), key)
        if is_class_node(section) and section is not value and key in self.origins:
            self.origins[key + ("class_path",)] = self.origins[key]
        return section

    def _merge_into(self, base: dict, update: dict, origins: dict[Key, str], at: Key, rel: Key) -> None:
        if is_class_node(base) or is_class_node(update):
            _gather_init_args(base, self.origins, at)
            _gather_init_args(update, origins, rel)
            old, new = base.get("class_path"), update.get("class_path")
            if old is not None and new is not None and new != old:
                self._carry_init_args(base, at)
        for name, value in update.items():
            here = at + (name,)
            value = _parsed_mapping(value)
            current = base.get(name)
            if isinstance(current, dict):  # a class named alone over a mapping
                value = _as_section(value, here)
            if isinstance(value, dict) and name in base:  # keys for a class named alone
                current = base[name] = self._section_from(current, here)
            if isinstance(value, dict) and isinstance(current, dict) and _merges(at, name, current, value):
                if rel + (name,) in origins:
                    self.origins[here] = origins[rel + (name,)]
                self._merge_into(current, value, origins, here, rel + (name,))
                continue
            self._forget(here)
            base[name] = value
            for key, source in origins.items():
                if key[: len(rel) + 1] == rel + (name,):
                    self.origins[at + key[len(rel):]] = source

    def _carry_init_args(self, node: dict, at: Key) -> None:
        """Another class named: keep the arguments given so far aside, for the new class to take what it can.

        Arguments carried from before the old class apply only where the old class took them too.
        """
        earlier = self.carried.pop(at, {})
        took = _argument_names(node["class_path"])
        carried = {name: given for name, given in earlier.items() if took is None or name in took}
        for name, value in node.pop("init_args", {}).items():
            carried[name] = (value, self.origin(at + ("init_args", name)))
        self._forget(at + ("init_args",))
        if carried:
            self.carried[at] = carried

    def _forget(self, prefix: Key) -> None:
        """Drop what is known of a replaced value: where its parts came from and what they carried."""
        for known in (self.origins, self.carried):
            for key in [key for key in known if key[: len(prefix)] == prefix]:
                del known[key]


def read_yaml(path: str | Path) -> Config:
    """One YAML config file as a :class:`Config` whose values know their ``file:line``.

    Bad YAML, tags, a top level that is not a mapping, a key that is not a name and a key given twice
    in one mapping are errors naming the file and line.
    """
    return Config(*yaml_files.load(path))


def _parsed_mapping(value: Any) -> Any:
    """A flag's text that is a YAML mapping (``--model.schedule={warmup: 3}``) as that mapping, so it merges
    as the same mapping in a file would; any other value as it is."""
    if isinstance(value, FlagText) and value.lstrip().startswith("{"):
        parsed = yaml_files.parse_text(value)
        if isinstance(parsed, dict):
            return {name: FlagText(item) if isinstance(item, str) else item for name, item in parsed.items()}
    return value


def _as_section(value: Any, key: Key) -> Any:
    """``CSVLogger`` as ``{class_path: CSVLogger}`` (so keys can be added to it); any other value as it is.

    Under ``model:`` and ``data:``, which always name a class, any name does (``model: Net``).
    """
    if names_a_class(value) or (key in (("model",), ("data",)) and isinstance(value, str) and value
                                and isinstance(yaml_files.parse_text(value), str)):
        return {"class_path": value}
    return value


def _merges(at: Key, name: Any, old: dict, new: dict) -> bool:
    """Whether two mappings merge key by key (sections) or the newer replaces the older (argument values)."""
    return not at or name == "init_args" or is_class_node(old) or is_class_node(new)


def _gather_init_args(node: dict, origins: dict[Key, str], at: Key) -> None:
    """``model: {class_path: X, lr: 0.1}`` and ``--model.lr`` are short for ``model.init_args.lr``."""
    given = node.get("init_args", {})
    if given is None or (isinstance(given, FlagText) and yaml_files.parse_text(given) is None):  # left empty
        node["init_args"] = {}
    loose = [name for name in node if name not in CLASS_KEYS]
    if not loose:
        return
    init_args = node.setdefault("init_args", {})
    for name in loose:
        init_args[name] = node.pop(name)
        for key in [key for key in origins if key[: len(at) + 1] == at + (name,)]:
            origins[at + ("init_args",) + key[len(at):]] = origins.pop(key)


def _argument_names(class_path: Any) -> set[str] | None:
    """The names ``class_path``'s class takes, or None where it takes any (``**kwargs``) or cannot be found."""
    found = find(short_names().get(class_path, class_path)) if isinstance(class_path, str) else None
    if not inspect.isclass(found):
        return None
    named, _, takes_more = parameters(found)
    return None if takes_more else set(named)
