"""Write the API reference: ``docs/api/<package>.rst`` for each public package, documenting exactly its ``__all__``.

``conf.py`` runs this at the start of every build, so the reference cannot drift from ``__all__``: a name added
to a package's ``__all__`` gets its entry in the next build, and one without a docstring still gets its
signature. Each package has a page (its functions, exceptions and constants, and a table of everything it
exports), and each class a page of its own.

An object exported by several packages (``framework.Trainer`` is ``framework.trainer.Trainer``) is documented
once, under its *home*: the top-level ``framework`` when it exports it, else the exporting package that is the
longest prefix of the module defining it. The others list it as an alias, and ``conf.py`` enters the alias in
the inventory, so ``framework.trainer.Trainer`` resolves too.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import os
import pkgutil
import re
from pathlib import Path

import framework

HERE = Path(__file__).parent
API = HERE / "api"
MODULES = ("framework.protocols", "framework.testing")  # public modules that are not packages

# The large classes are built from private mixins, one concept each: their pages list the members under a heading
# per mixin, keyed by the module that defines the members, in this order.
SECTIONS = {
    "framework.module_steps": "Steps",
    "framework.module_optimization": "Optimization",
    "framework.module_logging": "Logging",
    "framework.module_hook_defaults": "Hooks, in the order they run",
    "framework.datamodule": "Hooks, state and loading",
    "framework.loader_hooks": "Data loaders",
    "framework.hparams": "Hyperparameters",
    "framework.module": "Where it runs, loading and export",
    "framework.runtime.runtime": "Setting up",
    "framework.runtime.step_methods": "Inside a step",
    "framework.runtime.rank_start": "Starting the processes",
    "framework.runtime.collectives": "Across the processes",
    "framework.runtime.reporting": "Callbacks and loggers",
    "framework.runtime.saving": "Saving and loading",
    "framework.accelerate.accelerator": "The Accelerator",
    "framework.accelerate.preparation": "Preparing",
    "framework.accelerate.processes": "The processes",
    "framework.accelerate.synchronization": "Gradient synchronization and accumulation",
    "framework.accelerate.tracking": "Trackers",
    "framework.accelerate.files": "Saving and loading",
}


def public_packages() -> list[str]:
    """Every package (and public module) of ``framework`` with an ``__all__``, in reading order."""
    found = ["framework"] + [m.name for m in pkgutil.walk_packages(framework.__path__, "framework.") if m.ispkg]
    found += MODULES
    return sorted((name for name in found if hasattr(importlib.import_module(name), "__all__")),
                  key=lambda name: (name != "framework", name))


@functools.cache
def exported() -> dict[str, dict[str, object]]:
    """``{package: {name: object}}`` for every public package's ``__all__``."""
    return {pkg: {name: getattr(importlib.import_module(pkg), name) for name in importlib.import_module(pkg).__all__}
            for pkg in public_packages()}


def homes() -> dict[int, str]:
    """The package each shared object is documented under, by ``id``: see the module docstring."""
    exporters: dict[int, list[str]] = {}
    objects: dict[int, object] = {}
    for pkg, names in exported().items():
        for obj in names.values():
            if not _is_constant(obj):
                exporters.setdefault(id(obj), []).append(pkg)
                objects[id(obj)] = obj
    return {key: _home(objects[key], packages) for key, packages in exporters.items()}


def _home(obj: object, packages: list[str]) -> str:
    if "framework" in packages:
        return "framework"
    defined_in = getattr(obj, "__module__", None) or ""
    fitting = [p for p in packages if defined_in == p or defined_in.startswith(p + ".")]
    return max(fitting, key=len) if fitting else packages[0]


def aliases() -> dict[str, str]:
    """``{"framework.trainer.Trainer": "framework.Trainer", ...}``: each name documented under another path."""
    home_of = homes()
    found = {}
    for pkg, names in exported().items():
        for name, obj in names.items():
            if not _is_constant(obj) and home_of[id(obj)] != pkg:
                found[f"{pkg}.{name}"] = f"{home_of[id(obj)]}.{name}"
    return found


def _is_constant(obj: object) -> bool:
    return isinstance(obj, (str, int, float, bytes, tuple, frozenset))


def _members(cls: type) -> list[str]:
    """The public members a class page lists: its own and those of its private ``framework`` bases (mixins such
    as ``Module``'s hooks), not those of documented bases (``Callback``'s hooks stay on ``Callback``'s entry) or
    of torch and the standard library, nor plumbing marked ``:meta private:`` in its docstring."""
    public = public_ids()
    names: list[str] = []
    in_parameter_list = _fields_documented_as_parameters(cls)
    for klass in cls.__mro__:
        if klass is not cls and (id(klass) in public or not klass.__module__.startswith("framework")):
            continue
        for name, member in vars(klass).items():
            private = ":meta private:" in (inspect.getdoc(member) or "")
            if (not name.startswith("_") and name not in names and not private and name not in in_parameter_list
                    and not _sets_a_documented_attribute(cls, name, member)):
                names.append(name)
        names += [name for name in _documented_instance_attributes(klass) if name not in names]
    return names


def _documented_instance_attributes(cls: type) -> list[str]:
    """The public attributes a class's methods set on ``self`` under a ``#:`` comment (a callback's results, such
    as ``ModelCheckpoint.best_model_path``): autodoc documents them as it does class attributes."""
    from sphinx.errors import PycodeError
    from sphinx.pycode import ModuleAnalyzer

    try:
        found = ModuleAnalyzer.for_module(cls.__module__).find_attr_docs()
    except PycodeError:  # a module without source (compiled): nothing to read the comments from
        return []
    return [name for (owner, name) in found if owner == cls.__qualname__ and not name.startswith("_")
            and name not in vars(cls)]


def _sets_a_documented_attribute(cls: type, name: str, member: object) -> bool:
    """A class attribute that only gives another value to one a public base documents (a strategy's ``name``):
    the base's entry describes it."""
    if callable(member) or isinstance(member, (property, classmethod, staticmethod)):
        return False
    public = public_ids()
    return any(name in vars(base) for base in cls.__mro__[1:] if id(base) in public)


def _fields_documented_as_parameters(cls: type) -> set[str]:
    """A dataclass's fields that its docstring documents with ``:param NAME:``: the class's parameter list
    describes them, so they get no entry of their own (which would repeat the name with no text)."""
    if not dataclasses.is_dataclass(cls):
        return set()
    documented = set(re.findall(r":param\s+(?:[^:\s]+\s+)?(\w+)\s*:", vars(cls).get("__doc__") or ""))
    return {field.name for field in dataclasses.fields(cls) if field.name in documented}


@functools.cache
def public_ids() -> frozenset[int]:
    return frozenset(id(obj) for names in exported().values() for obj in names.values())


def _directive(pkg: str, name: str, obj: object) -> list[str]:
    if inspect.isclass(obj):
        kind = "autoexception" if issubclass(obj, BaseException) else "autoclass"
        members = _members(obj)
        lines = [f".. {kind}:: {name}", "   :show-inheritance:"]
        if members:
            lines += [f"   :members: {', '.join(members)}", "   :undoc-members:"]
        return lines + [""]
    if callable(obj):
        return [f".. autofunction:: {name}", ""]
    return [f".. autodata:: {name}", ""]


def has_own_page(obj: object) -> bool:
    """A class gets a page of its own (``api/<package>.<Name>.rst``); functions, exceptions and constants are
    listed on their package's page."""
    return inspect.isclass(obj) and not issubclass(obj, BaseException)


def render(pkg: str, names: dict[str, object], home_of: dict[int, str]) -> str:
    title = f"``{pkg}``"
    lines = [title, "=" * len(title), "",
             f".. automodule:: {pkg}", "   :no-members:", "", f".. currentmodule:: {pkg}", ""]
    own = [n for n, obj in sorted(names.items(), key=lambda item: item[0].lower())
           if _is_constant(obj) or home_of[id(obj)] == pkg]
    shared = [n for n in sorted(names, key=str.lower) if n not in own]
    paged = [n for n in own if has_own_page(names[n])]
    if own:
        lines += [".. autosummary::", "   :nosignatures:", ""] + [f"   {n}" for n in own] + [""]
    if paged:
        lines += [".. toctree::", "   :hidden:", ""] + [f"   {pkg}.{n}" for n in paged] + [""]
    if shared:
        lines += ["Also exported here, documented under another path:", ""]
        lines += [f"- ``{pkg}.{n}`` is :py:obj:`{home_of[id(names[n])]}.{n}`" for n in shared] + [""]
    for name in own:
        if name not in paged:
            lines += _directive(pkg, name, names[name])
    return "\n".join(lines)


def render_class(pkg: str, name: str, obj: object) -> str:
    """The page of one class: its description, its constructor's parameters, then every member (under a heading
    per mixin where ``SECTIONS`` names them all)."""
    title = f"``{name}``"
    head = [title, "=" * len(title), "", f"``{pkg}.{name}``", "", f".. currentmodule:: {pkg}", ""]
    sections = _sections(obj)
    if len(sections) < 2:
        return "\n".join(head + _directive(pkg, name, obj))
    lines = head + [f".. autoclass:: {name}", "   :show-inheritance:", ""]
    for heading in sorted(sections, key=list(SECTIONS.values()).index):
        lines += [f"   .. rubric:: {heading}", ""]
        for member_name, member in sections[heading]:
            lines += [f"   .. {_member_directive(member)}:: {member_name}", ""]
    return "\n".join(lines)


def _sections(cls: type) -> dict[str, list[tuple[str, object]]]:
    """A class's members by ``SECTIONS`` heading, each with the object its class body holds; ``{}`` where a
    member's module has no heading."""
    found: dict[str, list[tuple[str, object]]] = {}
    for name in _members(cls):
        owner = next((klass for klass in cls.__mro__ if name in vars(klass)), None)
        if owner is None:  # an attribute set on self under a #: comment
            owner = next(klass for klass in cls.__mro__ if name in _documented_instance_attributes(klass))
        heading = SECTIONS.get(owner.__module__)
        if heading is None:
            return {}
        found.setdefault(heading, []).append((name, vars(owner).get(name)))
    return found


def _member_directive(member: object) -> str:
    if isinstance(member, property) or type(member).__name__ == "cached_property":
        return "autoproperty"
    if inspect.isfunction(member) or isinstance(member, (classmethod, staticmethod)):
        return "automethod"
    return "autoattribute"


def summary(pkg: str) -> str:
    """The first sentence of a package's docstring: what it holds."""
    doc = inspect.getdoc(importlib.import_module(pkg)) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    first = re.sub(r":\w+(?::\w+)?:`~?([^`]+)`", r"``\1``", first)  # its roles name things relative to the package
    return first.split(". ")[0].rstrip(".") + "." if first else ""


def index(packages: list[str]) -> str:
    lines = ["API reference", "=============", "",
             "Every name in the ``__all__`` of ``framework`` and of each of its subpackages: a page per package, "
             "and a page per class. This reference is generated from the code at each build "
             "(``docs/gen_api.py``); each entry's [source] link shows the code it was made from.", "",
             ".. list-table::", "   :header-rows: 1", "   :widths: 30 70", "",
             "   * - Package", "     - What it holds"]
    for pkg in packages:
        lines += [f"   * - :doc:`{pkg}`", f"     - {summary(pkg)}"]
    lines += ["", ".. toctree::", "   :hidden:", "   :maxdepth: 1", ""]
    return "\n".join(lines + [f"   {pkg}" for pkg in packages]) + "\n"


def _write(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:  # an unchanged file keeps incremental builds incremental
        staged = path.with_name(f".{path.name}.{os.getpid()}")
        staged.write_text(text)
        os.replace(staged, path)  # whole or not at all: builds running side by side (pytest -n) read these files


def main() -> None:
    """Write ``docs/api/index.rst``, one page per package and one per class."""
    API.mkdir(exist_ok=True)
    home_of = homes()
    packages = exported()
    written = {"index"}
    for pkg, names in packages.items():
        _write(API / f"{pkg}.rst", render(pkg, names, home_of))
        written.add(pkg)
        for name, obj in names.items():
            if not _is_constant(obj) and home_of[id(obj)] == pkg and has_own_page(obj):
                _write(API / f"{pkg}.{name}.rst", render_class(pkg, name, obj))
                written.add(f"{pkg}.{name}")
    _write(API / "index.rst", index(list(packages)))
    for stale in API.glob("*.rst"):
        if stale.stem not in written:
            stale.unlink()


if __name__ == "__main__":
    main()
