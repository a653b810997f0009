"""The import rules of docs/architecture.md: no import circle, and every import points down the layers.

Imports are read from the source (inside functions too; not those under ``if TYPE_CHECKING:``, which never run).
Importing ``framework.a.b`` counts as importing the package ``framework.a`` too, as Python runs its ``__init__``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import framework

PACKAGE = Path(framework.__file__).parent

# The layers, bottom first. A module may import from its own group and from any group of a lower layer; groups
# side by side in one layer do not import each other. A group is a top-level module or subpackage of framework.
LAYERS: list[list[set[str]]] = [
    [{"errors", "console", "nested", "duration", "hooks", "loader_hooks", "seed", "version"}],
    [{"io"}],
    [{"export", "hparams", "utilities", "plugins"}],
    [{"loggers"}, {"profilers"}, {"precision"}, {"callbacks"}],
    [{"strategies"}],
    [{"runtime"}],
    [{"module", "module_hook_defaults", "module_optimization", "datamodule"}],
    [{"trainer"}, {"accelerate"}],
    [{"tuner"}],
    [{"cli"}, {"testing"}],
    [{"", "__main__"}],  # the package's own __init__ (public re-exports) and ``python -m framework``
]

# Imports that point up on purpose: a package offering, under Lightning's import path, a name that a higher layer
# defines. Each is made inside the package's module ``__getattr__``, so importing the package does not load it.
LAZY_REEXPORTS = {("callbacks", "tuner.finder_callbacks"), ("callbacks.batch_size_finder", "tuner.finder_callbacks"),
                  ("callbacks.lr_finder", "tuner.finder_callbacks")}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for child in node.body for inner in ast.walk(child))
    return [node for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skipped]


def _edges() -> dict[str, dict[str, int]]:
    """For every framework module (``""`` is the package itself), the framework modules it imports, with a line."""
    modules = _modules()
    edges: dict[str, dict[str, int]] = {name: {} for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _runtime_imports(ast.parse(path.read_text())):
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


def _is_lazy_reexport(module: str, target: str) -> bool:
    """Whether ``module`` importing ``target`` is (part of) one of the declared lazy re-exports: the module named
    there, or a package Python runs on the way to it."""
    return any(module == importer and (target == reexported or reexported.startswith(target + "."))
               for importer, reexported in LAZY_REEXPORTS)


def test_every_import_points_down_the_layers():
    upward = []
    for module, targets in _edges().items():
        for target, line in targets.items():
            here, there = _place(_group(module)), _place(_group(target))
            same_group = here == there
            if not same_group and there[0] >= here[0] and not _is_lazy_reexport(module, target):
                upward.append(f"framework.{module} (line {line}) imports framework.{target}")
    assert not upward, "imports against the layers of docs/architecture.md:\n" + "\n".join(sorted(upward))


def test_no_import_circle():
    edges = {module: {target for target in targets if not _is_lazy_reexport(module, target)}
             for module, targets in _edges().items()}
    circles = _strongly_connected(edges)
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(f"framework.{m}" for m in c) for c in circles)


def test_the_lazy_reexports_are_lazy_and_the_layer_table_names_every_group():
    edges = _edges()
    for module, target in LAZY_REEXPORTS:
        assert target in edges[module], f"LAZY_REEXPORTS names {module} -> {target}, which is not imported"
        tree = ast.parse(_modules()[module].read_text())
        lazy = {id(inner) for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
                for inner in ast.walk(node)}
        package = "framework." + target.partition(".")[0]
        eager = [node.lineno for node in _runtime_imports(tree)
                 if id(node) not in lazy and package in ast.unparse(node)]
        assert not eager, f"framework.{module} imports {package} outside its __getattr__ (lines {eager})"
    for module in edges:
        _place(_group(module))


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
