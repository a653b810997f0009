"""The rules of docs/architecture.md, kept by tests: no import circle, every import points down the layers, and
no module over 400 lines.

Imports are read from the source: at the top of a module, inside functions, and under ``if TYPE_CHECKING:`` (an
import only a type checker runs is still an arrow a reader follows; where one would point up, the layer below types
the object with a ``Protocol`` such as ``framework.protocols.TrainerLike``). Importing ``framework.a.b`` counts as
importing the package ``framework.a`` too, as Python runs its ``__init__``.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

import framework

PACKAGE = Path(framework.__file__).parent
#: The most lines a module may have, its docstrings and comments included: past it, it holds two concepts.
MOST_LINES = 400

# The layers, bottom first. A module may import from its own group and from any group of a lower layer; groups
# side by side in one layer do not import each other. A group is a top-level module or subpackage of framework.
LAYERS: list[list[set[str]]] = [
    [{"errors", "console", "nested", "duration", "hooks", "hook_docs", "module_hook_defaults", "loader_hooks", "seed",
      "version", "checks"}],
    [{"io"}],
    [{"export", "hparams", "utilities", "protocols"}],
    [{"loggers"}, {"profilers"}, {"precision"}, {"callbacks"}],
    [{"strategies"}],
    [{"plugins"}],
    [{"runtime"}],
    [{"module", "module_steps", "module_logging", "module_optimization", "datamodule"}],
    [{"trainer"}, {"accelerate"}],
    [{"tuner"}],
    [{"as_lightning"}],
    [{"cli"}, {"testing"}],
    [{"", "__main__"}],  # the package's own __init__ (public re-exports) and ``python -m framework``
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def _edges() -> dict[str, dict[str, int]]:
    """For every framework module (``""`` is the package itself), the framework modules it imports, with a line."""
    modules = _modules()
    edges: dict[str, dict[str, int]] = {name: {} for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = ["framework", *package.split(".")] if package else ["framework"]
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                if target != "framework" and not target.startswith("framework."):
                    continue
                target = target.removeprefix("framework").removeprefix(".")
                while target not in modules and target:
                    target = target.rpartition(".")[0]
                for imported in (target, *_packages_run_first(target, name)):
                    if imported != name:
                        edges[name].setdefault(imported, node.lineno)
    return edges


def _packages_run_first(target: str, importer: str) -> list[str]:
    """The packages whose ``__init__`` Python runs on importing ``target`` from ``importer``: those above
    ``target`` that do not hold ``importer`` (those have begun already). The package itself (``""``) is left out:
    every module is inside it."""
    parts = target.split(".")
    parents = [".".join(parts[:end]) for end in range(1, len(parts))]
    return [parent for parent in parents if not (importer == parent or importer.startswith(parent + "."))]


def _group(module: str) -> str:
    return module.partition(".")[0]


def _place(group: str) -> tuple[int, int]:
    for layer, groups in enumerate(LAYERS):
        for index, members in enumerate(groups):
            if group in members:
                return layer, index
    raise AssertionError(f"framework.{group} is in no layer of tests/test_architecture.py: add it to LAYERS "
                         "(and to its diagram, docs/_static/architecture.svg)")


def test_every_import_points_down_the_layers():
    upward = []
    for module, targets in _edges().items():
        for target, line in targets.items():
            here, there = _place(_group(module)), _place(_group(target))
            if here != there and there[0] >= here[0]:
                upward.append(f"framework.{module} (line {line}) imports framework.{target}")
    assert not upward, "imports against the layers of docs/architecture.md:\n" + "\n".join(sorted(upward))


def test_no_import_circle():
    circles = _strongly_connected({module: set(targets) for module, targets in _edges().items()})
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(f"framework.{m}" for m in c) for c in circles)


def test_every_group_is_in_the_layer_table():
    for module in _edges():
        _place(_group(module))


def test_no_module_is_over_400_lines():
    long = {f"framework/{path.relative_to(PACKAGE)}": count for path in PACKAGE.rglob("*.py")
            if (count := len(path.read_text().splitlines())) > MOST_LINES}
    assert not long, f"modules over {MOST_LINES} lines (split each by concept): {long}"


def test_the_rules_see_type_only_imports_lazy_ones_and_long_modules(tmp_path, monkeypatch):
    # Each rule run on a made-up package that breaks it, so a rule that looks at nothing fails here.
    package = tmp_path / "framework"
    (package / "callbacks").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "callbacks" / "__init__.py").write_text("")
    (package / "callbacks" / "base.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from framework.trainer import Trainer\n")
    (package / "trainer.py").write_text("def later():\n    from framework.callbacks import base\n"
                                        + "# a line\n" * MOST_LINES)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    edges = _edges()
    assert "trainer" in edges["callbacks.base"] and "callbacks.base" in edges["trainer"]
    assert _strongly_connected({module: set(targets) for module, targets in edges.items()})
    with pytest.raises(AssertionError, match=r"framework.callbacks.base \(line 3\) imports framework.trainer"):
        test_every_import_points_down_the_layers()
    with pytest.raises(AssertionError, match="framework/trainer.py"):
        test_no_module_is_over_400_lines()


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of two or more modules that import each other, directly or through others (Tarjan's algorithm,
    without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


def test_the_circle_finder_finds_circles_and_only_circles():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}, "f": {"g"}, "g": {"f"}}
    assert sorted(_strongly_connected(edges)) == [["a", "b", "c"], ["f", "g"]]
    assert _strongly_connected({"a": {"b"}, "b": set()}) == []


def test_the_architecture_diagram_names_every_group_of_the_layers():
    diagram = (PACKAGE.parent / "docs" / "_static" / "architecture.svg").read_text()
    labels = " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", diagram))
    words = set(labels.replace(",", " ").replace("·", " ").replace("|", " ").replace("(", " ").split())
    missing = [group for layer in LAYERS for groups in layer for group in groups
               if group not in ("", "__main__") and group not in words]
    assert not missing, f"docs/_static/architecture.svg (the layers of docs/architecture.md) does not name {missing}"
