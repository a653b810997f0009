"""Reading YAML for configs: values with the line each came from, and errors that name the line.

The loader is PyYAML's safe one, plus one rule from YAML 1.2: ``1e-3`` is a number (YAML 1.1, which
PyYAML follows, reads it as a string). Keys must be strings, and a key given twice in one mapping is
refused rather than silently dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from framework.cli.errors import ConfigError, Key

_STRING_TAG = "tag:yaml.org,2002:str"


class ConfigLoader(yaml.SafeLoader):
    """The safe loader, reading exponent-only floats (``1e-3``, ``5E+2``) as numbers."""


class ConfigDumper(yaml.SafeDumper):
    """The safe dumper, quoting the strings :class:`ConfigLoader` would read as numbers (``"1e5"``)."""


_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")
for _cls, _base in ((ConfigLoader, yaml.SafeLoader), (ConfigDumper, yaml.SafeDumper)):
    # A copy of the resolver table: adding to the inherited one would change PyYAML's own classes.
    _cls.yaml_implicit_resolvers = {first: list(rules) for first, rules in _base.yaml_implicit_resolvers.items()}
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789"))

# More values than a config can sensibly hold: YAML aliases can make a short file expand without end.
_MOST_VALUES = 100_000


def dump(data: Any) -> str:
    """``data`` as YAML that :func:`load` reads back to the same values."""
    return yaml.dump(data, Dumper=ConfigDumper, sort_keys=False, allow_unicode=True)


def parse_text(text: str) -> Any:
    """Command-line text read as YAML (``3`` a number, ``[1, 2]`` a list), else the text itself."""
    try:
        return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError:
        return str(text)


def load(path: str | Path) -> tuple[dict, dict[Key, str]]:
    """A YAML config file's values and the ``file:line`` of each key in it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file (looked in {Path.cwd()}).") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"--config {path}: cannot be read as UTF-8 text: {error}") from None
    try:
        root = yaml.compose(text, Loader=ConfigLoader)
        if root is None:
            return {}, {}
        if not isinstance(root, yaml.MappingNode):
            raise ConfigError(f"{path}:{root.start_mark.line + 1}: a config file is a mapping of sections "
                              f"(trainer:, model:, data: ...), not a {_node_kind(root)}.")
        _check_size(root, path)
        _check_keys(root, path)
        tree = ConfigLoader(text).get_single_data()
    except yaml.constructor.ConstructorError as error:
        raise ConfigError(f"{_yaml_place(path, error)}: {error.problem}; a config holds plain values (numbers, "
                          f"strings, true/false, null, lists and mappings), with no YAML tags.") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{_yaml_place(path, error)}: not valid YAML: {_yaml_problem(error)}") from None
    return tree, {key: f"{path}:{node.start_mark.line + 1}" for key, node in _walk(root, ())}


def _check_size(root: yaml.Node, path: Path) -> None:
    """Refuse a document whose aliases refer to themselves or expand past :data:`_MOST_VALUES` values."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_nodes:
            raise ConfigError(f"{path}:{node.start_mark.line + 1}: a YAML alias here refers to the value holding it.")
        open_nodes.add(id(node))
        children = [child for pair in node.value for child in pair] if isinstance(node, yaml.MappingNode) else (
            node.value if isinstance(node, yaml.SequenceNode) else [])
        sizes[id(node)] = min(1 + sum(size(child) for child in children), _MOST_VALUES + 1)
        open_nodes.discard(id(node))
        return sizes[id(node)]

    if size(root) > _MOST_VALUES:
        raise ConfigError(f"{path}: its aliases expand to more than {_MOST_VALUES:,} values; a config is not "
                          f"that large. Write the values out, or alias fewer.")


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


def _check_keys(node: yaml.Node, path: Path) -> None:
    """Keys are names (strings), each given once per mapping."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _STRING_TAG:
                shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else "a " + _node_kind(key_node)
                raise ConfigError(f"{path}:{line}: a key is a name, got {shown!r}; quote it if it is one.")
            if key_node.value in seen:
                raise ConfigError(f"{path}:{line}: key {key_node.value!r} is given twice in one mapping (first on "
                                  f"line {seen[key_node.value]}); YAML would keep only the second. Remove one.")
            seen[key_node.value] = line
            _check_keys(value_node, path)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_keys(item, path)


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
    return {yaml.SequenceNode: "list", yaml.MappingNode: "mapping"}.get(type(node), "single value")
