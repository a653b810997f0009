"""A run's configuration gathered from its sources: YAML files and ``--dotted.key=value`` flags.

Each source is read into one nested tree of plain values; later sources override earlier ones key by
key, and every value remembers where it came from (``file.yaml:12`` or the flag), so an error about
it can say where to look. Values given as flags stay text (:class:`FlagText`) until they are typed
against the signature they are for, because ``--model.init_args.name=007`` means the string ``"007"``
to a ``str`` argument and the number 7 to an ``int`` one.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from framework.errors import MisconfigurationError

Key = tuple  # a path into the tree: mapping keys and list indices

CLASS_KEYS = ("class_path", "init_args")


class ConfigError(MisconfigurationError):
    """A config file or a command-line flag cannot be used; the message says where it is and what to do."""


class FlagText(str):
    """A value typed on the command line, kept as text until the argument it is for gives it a type."""


class Config:
    """A nested tree of values with the source (``file:line`` or flag) of each value in it.

    Example::

        config = Config()
        config.merge(read_yaml("base.yaml"))
        config.set_flag("--trainer.max_epochs=3")
        config.get(("trainer", "max_epochs"))   # FlagText("3")
    """

    def __init__(self, tree: dict | None = None, origins: dict[Key, str] | None = None) -> None:
        self.tree: dict = tree if tree is not None else {}
        self.origins: dict[Key, str] = origins if origins is not None else {}

    def get(self, key: Key, default: Any = None) -> Any:
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
        """Override this tree with ``other``'s values, placed at ``at``; sections merge key by key."""
        self._merge_into(self._section(at), other.tree, other.origins, at, ())

    def set_flag(self, flag: str, value: str) -> None:
        """Apply ``--a.b.c`` with its text ``value``; ``--model=pkg.Net`` names the section's class."""
        key = tuple(flag[2:].split("."))
        if any(not part for part in key):
            raise ConfigError(f"{flag}: a flag is --section.key=value, with no empty part between the dots.")
        if "[" in flag:
            example = "--trainer.callbacks='[{class_path: EarlyStopping, init_args: {monitor: val_loss}}]'"
            raise ConfigError(f"{flag}: a flag names a key, not an item of a list; give the whole list, e.g. "
                              f"{example}.")
        text = FlagText(value)
        parent = self.get(key[:-1])
        if key[-1] not in CLASS_KEYS and _names_a_class(parent, key, text):
            update, where = {"class_path": text}, key
        else:
            update, where = {key[-1]: text}, key[:-1]
        self.merge(Config(update, {(name,): flag for name in update}), at=where)

    def _section(self, at: Key) -> dict:
        node = self.tree
        for depth, part in enumerate(at):
            child = node.get(part)
            if isinstance(child, str):  # ``--trainer.logger=CSVLogger --trainer.logger.save_dir=logs``
                child = node[part] = {"class_path": child}
                source = self.origins.get(at[: depth + 1])
                if source:
                    self.origins[at[: depth + 1] + ("class_path",)] = source
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        return node

    def _merge_into(self, base: dict, update: dict, origins: dict[Key, str], at: Key, rel: Key) -> None:
        if "class_path" in base or "class_path" in update:
            self._move_into_init_args(base, at)
            update = _moved_into_init_args(update, origins, rel)
            old, new = base.get("class_path"), update.get("class_path")
            if old is not None and new is not None and new != old:
                self._drop(at, "init_args")  # another class: the arguments given for the old one do not apply
                base.pop("init_args", None)
        for name, value in update.items():
            here = at + (name,)
            if isinstance(value, dict) and isinstance(base.get(name), dict):
                if (rel + (name,)) in origins:
                    self.origins[here] = origins[rel + (name,)]
                self._merge_into(base[name], value, origins, here, rel + (name,))
                continue
            self._drop(at, name)
            base[name] = copy.deepcopy(value)
            for key, source in origins.items():
                if key[: len(rel) + 1] == rel + (name,):
                    self.origins[at + key[len(rel):]] = source

    def _move_into_init_args(self, node: dict, at: Key) -> None:
        loose = [name for name in node if name not in CLASS_KEYS]
        init_args = node.setdefault("init_args", {}) if loose else None
        for name in loose:
            init_args[name] = node.pop(name)
            for key in [key for key in self.origins if key[: len(at) + 1] == at + (name,)]:
                self.origins[at + ("init_args",) + key[len(at):]] = self.origins.pop(key)

    def _drop(self, at: Key, name: str) -> None:
        prefix = at + (name,)
        for key in [key for key in self.origins if key[: len(prefix)] == prefix]:
            del self.origins[key]


def _names_a_class(section: Any, key: Key, text: str) -> bool:
    """``--model=pkg.Net`` sets the class of a section given by class_path, not the section itself."""
    if len(key) == 1 and key[0] in ("model", "data"):
        return True
    child = section.get(key[-1]) if isinstance(section, dict) else None
    return isinstance(child, dict) and "class_path" in child


def _moved_into_init_args(update: dict, origins: dict[Key, str], rel: Key) -> dict:
    """``model: {class_path: X, lr: 0.1}`` and ``--model.lr`` are short for ``model.init_args.lr``."""
    loose = [name for name in update if name not in CLASS_KEYS]
    if not loose:
        return update
    moved = {name: value for name, value in update.items() if name in CLASS_KEYS}
    init_args = dict(moved.get("init_args") or {})
    for name in loose:
        init_args[name] = update[name]
        for key in [key for key in origins if key[: len(rel) + 1] == rel + (name,)]:
            origins[rel + ("init_args",) + key[len(rel):]] = origins[key]
    moved["init_args"] = init_args
    return moved


def read_yaml(path: str | Path) -> Config:
    """Read one YAML file into a :class:`Config` whose values know their ``file:line``.

    Bad YAML, a top level that is not a mapping and a key given twice in one mapping are errors
    naming the file and line.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file (looked in {Path.cwd()}).") from None
    except OSError as error:
        raise ConfigError(f"--config {path}: cannot be read: {error}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        raise ConfigError(f"{_yaml_place(path, error)}: not valid YAML: {_yaml_problem(error)}") from None
    if root is None:
        return Config()
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(f"{path}:{root.start_mark.line + 1}: a config file is a mapping of sections (trainer:, "
                          f"model:, data: ...), not a {_node_kind(root)}.")
    origins: dict[Key, str] = {}
    for key, node in _walk(root, ()):
        origins[key] = f"{path}:{node.start_mark.line + 1}"
    _refuse_repeated_keys(root, path)
    tree = yaml.SafeLoader(text).get_single_data()
    return Config(tree, origins)


def _walk(node: yaml.Node, key: Key) -> Iterator[tuple[Key, yaml.Node]]:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            here = key + (key_node.value,)
            yield here, key_node
            yield from _walk(value_node, here)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield key + (index,), item
            yield from _walk(item, key + (index,))


def _refuse_repeated_keys(node: yaml.Node, path: Path) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.value in seen:
                raise ConfigError(f"{path}:{line}: key {key_node.value!r} is given twice in one mapping (first on "
                                  f"line {seen[key_node.value]}); YAML would keep only the second. Remove one.")
            seen[key_node.value] = line
            _refuse_repeated_keys(value_node, path)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_repeated_keys(item, path)


def _yaml_place(path: Path, error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    return f"{path}:{mark.line + 1}" if mark is not None else str(path)


def _yaml_problem(error: yaml.YAMLError) -> str:
    context, problem = getattr(error, "context", None), getattr(error, "problem", None)
    started = getattr(error, "context_mark", None)
    if context and started is not None:
        context += f" (begun on line {started.line + 1})"
    return ", ".join(part for part in (context, problem) if part) or str(error)


def _node_kind(node: yaml.Node) -> str:
    return "list" if isinstance(node, yaml.SequenceNode) else "single value"
