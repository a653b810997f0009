"""The shape of the package, counted from its source: what a newcomer meets before changing something.

Prints one table: modules per group, modules over 400 lines, imports against the layers (type-only ones
included, since a reader follows them too), import circles (again with the type-only imports), modules inside
``trainer/`` that import the Trainer's own modules back, and the distinct attributes the loops and their helpers
read on the Trainer (``trainer.x`` and ``self.trainer.x``).

Nothing is imported or run: the figures come from the files alone, so the script runs without torch.

    python benchmarks/structure.py
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "framework"
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_architecture import _group, _place, _strongly_connected  # noqa: E402  (the layer table the tests keep)

#: The modules of ``trainer/`` that make up the Trainer class itself (before the Run there were three:
#: ``trainer``, ``trainer_run`` and ``properties``).
TRAINER_CLASS = {"trainer.trainer", "trainer.trainer_run", "trainer.properties"}
#: The loops and helpers that are handed a Run instead of the Trainer (both names where one was renamed).
LOOP_MODULES = ["fit_loop", "fit_validation", "validation_in_fit", "eval_loop", "automatic", "manual", "step",
                "optimizers", "data", "checkpoint", "checkpoint_contents", "checkpoint_paths", "preemption",
                "auto_resume", "dispatch", "hook_runner", "launch", "launched_ranks", "lifecycle"]
LIMIT = 400


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every framework module ``name`` imports, at any depth and under ``TYPE_CHECKING`` too."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = ["framework", *package.split(".")] if package else ["framework"]
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            if not target.startswith("framework."):
                continue
            target = target.removeprefix("framework.")
            while target not in modules and target:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _trainer_reads(path: Path) -> set[str]:
    """The attributes read on ``trainer`` or ``self.trainer`` in one module."""
    reads = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id == "trainer":
            reads.add(node.attr)
        elif isinstance(owner, ast.Attribute) and owner.attr == "trainer" and isinstance(owner.value, ast.Name) \
                and owner.value.id == "self":
            reads.add(node.attr)
    return reads


def measure() -> dict[str, object]:
    """The figures the table prints, by row name."""
    modules = _modules()
    edges = {name: _imports(name, path, modules) for name, path in modules.items()}
    lines = {name: len(path.read_text().splitlines()) for name, path in modules.items()}
    upward = sorted(f"{module} -> {target}" for module, targets in edges.items() for target in targets
                    if _place(_group(module)) != _place(_group(target))
                    and _place(_group(target))[0] >= _place(_group(module))[0])
    back_into_trainer = sorted(f"{module} -> {target}" for module, targets in edges.items()
                               if module.startswith("trainer.") and module not in TRAINER_CLASS
                               for target in targets if target in TRAINER_CLASS)
    reads: set[str] = set()
    for stem in LOOP_MODULES:
        path = PACKAGE / "trainer" / f"{stem}.py"
        if path.exists():
            reads |= _trainer_reads(path)
    return {
        "modules": len(modules),
        "groups": len(Counter(_group(name) for name in modules)),
        "trainer/ modules": sum(name.startswith("trainer.") for name in modules),
        f"modules over {LIMIT} lines": sorted(f"{name} {count}" for name, count in lines.items() if count > LIMIT),
        "imports against the layers (type-only too)": upward,
        "import circles (type-only too)": [" -> ".join(circle) for circle in _strongly_connected(edges)],
        "trainer/ imports of the Trainer class": back_into_trainer,
        "Trainer attributes the loops read": sorted(reads),
        "lines of the Trainer class": sum(lines.get(name, 0) for name in TRAINER_CLASS),
    }


def main() -> None:
    """Print the table, then the names behind each count."""
    figures = measure()
    print(f"| {'what':<44} | {'count':>5} |")
    print(f"|{'-' * 46}|{'-' * 7}:|")
    for row, value in figures.items():
        count = len(value) if isinstance(value, list) else value
        print(f"| {row:<44} | {count:>5} |")
    for row, value in figures.items():
        if isinstance(value, list) and value:
            print(f"\n{row}:")
            for item in value:
                print(f"  {item}")


if __name__ == "__main__":
    main()
