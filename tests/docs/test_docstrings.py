"""Every constructor argument of the public classes has a ``:param NAME:`` field in its class's docstring.

Checked: ``framework.Trainer``, ``framework.Runtime``, ``framework.accelerate.Accelerator`` and every class in the
``__all__`` of ``framework.strategies``, ``framework.precision``, ``framework.callbacks`` and ``framework.loggers``.
The API reference shows the class docstring (not ``__init__``'s), so for each class:

- every parameter of ``inspect.signature(cls)`` but ``*args`` and ``**kwargs`` has a ``:param NAME:`` field in the
  class's own docstring (``cls.__dict__["__doc__"]``: a docstring is not inherited);
- no ``:param NAME:`` field of that docstring names something the constructor does not take (a field for a
  ``**kwargs`` or ``*args`` under its own name is allowed).

Inherited constructors: a class may leave arguments to a base class by naming the base in its docstring with
``:class:`~framework.<package>.<Base>``` (for example ``ShardedStrategy``, whose constructor is
``DDPStrategy``'s). The base must be in the class's MRO and in that package's ``__all__`` (so the reference has a
page to go to); an argument without a field of its own then counts as documented when the base's docstring
documents it, by the same rule (references may chain). A class taking no argument has nothing to document. Enums
are left out: their members are looked up by value, not built.

Import only, no model is built: fast. Run ``python -m pytest tests/docs/test_docstrings.py -q``.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import os
import re

import pytest

PACKAGES = ("framework.strategies", "framework.precision", "framework.callbacks", "framework.loggers")
SINGLE_CLASSES = ("framework.Trainer", "framework.Runtime", "framework.accelerate.Accelerator")
FIELD = re.compile(r"^[ \t]*:param[ \t]+(?:[^:\s]+[ \t]+)?(\w+)[ \t]*:", re.MULTILINE)
REFERENCE = re.compile(r":(?:py:)?class:`~?([\w.]+)`")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNNAMED = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _attribute(path: str) -> object:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _checked_classes() -> list[tuple[str, type]]:
    found = [(path, _attribute(path)) for path in SINGLE_CLASSES]
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and not issubclass(obj, enum.Enum):
                found.append((f"{package}.{name}", obj))
    return found


CLASSES = _checked_classes()


def _own_docstring(cls: type) -> str:
    return inspect.cleandoc(vars(cls).get("__doc__") or "")


def _fields(cls: type) -> set[str]:
    return set(FIELD.findall(_own_docstring(cls)))


def _referenced_base(cls: type, target: str) -> type | None:
    """The class ``target`` names, when it is a public base of ``cls`` (in its MRO and in its package's
    ``__all__``); else None."""
    module, _, name = target.rpartition(".")
    try:
        package = importlib.import_module(module)
    except ImportError:
        return None
    base = getattr(package, name, None) if name in getattr(package, "__all__", ()) else None
    return base if inspect.isclass(base) and base is not cls and base in cls.__mro__ else None


def _documented(cls: type, seen: frozenset[type] = frozenset()) -> set[str]:
    """The names documented for ``cls``: its own fields, and those of the bases its docstring refers to."""
    names = _fields(cls)
    for target in REFERENCE.findall(_own_docstring(cls)):
        base = _referenced_base(cls, target)
        if base is not None and base not in seen:
            names |= _documented(base, seen | {cls})
    return names


def _source_file(cls: type) -> str:
    try:
        return os.path.relpath(inspect.getsourcefile(cls) or "?", ROOT)
    except TypeError:
        return "?"


def test_the_packages_classes_are_checked():
    labels = {label for label, _ in CLASSES}
    for expected in ("framework.strategies.DDPStrategy", "framework.precision.Float16Mixed",
                     "framework.callbacks.ModelCheckpoint", "framework.loggers.CSVLogger", "framework.Trainer"):
        assert expected in labels


@pytest.mark.parametrize(("label", "cls"), CLASSES, ids=[label for label, _ in CLASSES])
def test_constructor_arguments_have_param_fields(label: str, cls: type):
    parameters = inspect.signature(cls).parameters
    documented = _documented(cls)
    missing = [name for name, p in parameters.items() if p.kind not in UNNAMED and name not in documented]
    extra = sorted(_fields(cls) - set(parameters))
    problems = []
    if missing:
        problems.append(f"no `:param NAME:` field for {', '.join(missing)}")
    if extra:
        problems.append(f"fields for names the constructor does not take: {', '.join(extra)}")
    assert not problems, (
        f"{label}: {'; '.join(problems)}. Edit the docstring of class {cls.__name__} in {_source_file(cls)} "
        "(one `:param NAME:` field per constructor argument; the rule is in tests/docs/test_docstrings.py)."
    )
