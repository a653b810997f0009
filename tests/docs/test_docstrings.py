"""The public API's docstrings name each constructor argument (``:param NAME:``) and each error raised on bad
input (``:raises NAME:``).

Every constructor argument of the public classes has a ``:param NAME:`` field in its class's docstring. Checked:
``framework.Trainer``, ``framework.Runtime``, ``framework.accelerate.Accelerator`` and every class in the ``__all__``
of ``framework.strategies``, ``framework.precision``, ``framework.callbacks`` and ``framework.loggers``. The API
reference shows the class docstring (not ``__init__``'s), so for each class:

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

Every public callable that raises on bad input says so with a ``:raises NAME:`` field. Checked: each name of each
public package's ``__all__`` (as ``docs/gen_api.py`` lists them, under the package that documents it): a function,
and of a class its constructor (``__init__``, and a dataclass's ``__post_init__``, where the class or a private
framework base defines it; a public base's is checked on the base) and each member its page lists (method,
classmethod, staticmethod, property getter). Counted: a ``raise`` statement in the callable's own body (``ast``;
not in a nested function or class) of an exception class (``raise SomeError(...)``, ``raise SomeError``, ``raise
errors.SomeError(...) from e``), or of a call to a function annotated to return one (an error factory such as
``framework.errors.unloggable_value``). Not counted: a bare ``raise``, a re-raise of a variable (``raise error``),
an ``assert``, code framework does not define, and ``NotImplementedError`` itself (not a subclass) raised by a method
whose body is only its docstring and that ``raise``: a placeholder for a subclass to write. The docstring is the
one autodoc shows: the member's (inherited where it has none), and for a constructor the class's
(``autoclass_content`` is ``"class"``). The field must name the raised class itself (``:raises
MisconfigurationError:``, or a dotted path ending in it): a base class does not cover a subclass.

Import only, no model is built: fast. Run ``python -m pytest tests/docs/test_docstrings.py -q``.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import enum
import importlib
import inspect
import os
import re
import sys
import textwrap
from collections.abc import Callable, Iterator

import pytest

from tests.docs.site_build import DOCS

sys.path.insert(0, str(DOCS))
import gen_api  # noqa: E402

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


RAISES = re.compile(r"^[ \t]*:raises[ \t]+~?(?:[\w.]+\.)?(\w+)[ \t]*:", re.MULTILINE)


def _public_callables() -> Iterator[tuple[str, Callable, str]]:
    """``(qualified name, function, the docstring autodoc shows for it)`` for each public callable."""
    home_of, public = gen_api.homes(), gen_api.public_ids()
    for package, names in gen_api.exported().items():
        for name, obj in names.items():
            if gen_api._is_constant(obj) or home_of[id(obj)] != package:
                continue
            label = f"{package}.{name}"
            if not inspect.isclass(obj):
                if inspect.isfunction(inspect.unwrap(obj)):
                    yield label, obj, inspect.getdoc(obj) or ""
                continue
            constructors = ("__init__", "__post_init__") if dataclasses.is_dataclass(obj) else ("__init__",)
            for constructor in constructors:
                owner = next((klass for klass in obj.__mro__ if constructor in vars(klass)), object)
                if owner is obj or (id(owner) not in public and owner.__module__.startswith("framework")):
                    yield f"{label}.{constructor}", vars(owner)[constructor], inspect.getdoc(obj) or ""
            for member in gen_api._members(obj):
                found = inspect.getattr_static(obj, member, None)  # None: an attribute set on instances only
                function = found.fget if isinstance(found, property) else getattr(found, "__func__", found)
                if callable(function) and inspect.isfunction(inspect.unwrap(function)):
                    yield f"{label}.{member}", function, inspect.getdoc(getattr(obj, member)) or ""


class _OwnRaises(ast.NodeVisitor):
    """The ``raise`` statements of one function body, not those of the functions and classes defined in it."""

    def __init__(self) -> None:
        self.found: list[ast.Raise] = []

    def visit_FunctionDef(self, node: ast.AST) -> None:
        pass

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def visit_Raise(self, node: ast.Raise) -> None:
        self.found.append(node)


def _exception_class(expression: ast.expr, namespace: dict) -> type | None:
    """The exception class ``raise expression`` raises, where the source names it (or an error factory annotated
    to return it); None for a variable or anything else that cannot be read off the source."""
    called = isinstance(expression, ast.Call)
    node, path = expression.func if called else expression, []
    while isinstance(node, ast.Attribute):
        path.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    obj = namespace.get(node.id, getattr(builtins, node.id, None))
    for part in path:
        obj = getattr(obj, part, None)
    if called and inspect.isfunction(obj):
        try:
            obj = inspect.signature(obj, eval_str=True).return_annotation
        except (NameError, TypeError):
            return None
    return obj if inspect.isclass(obj) and issubclass(obj, BaseException) else None


def _is_placeholder(body: list[ast.stmt]) -> bool:
    """A body that is its docstring (if any) and one ``raise``: a method for a subclass to write."""
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def raised_classes(function: Callable) -> set[type]:
    """The exception classes ``function``'s own body raises, by the rule of the module docstring."""
    function = inspect.unwrap(function)
    if not function.__module__.startswith("framework"):
        return set()
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):  # made by dataclasses or the like: no source to read
        return set()
    definition = ast.parse(source).body[0]
    assert isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)), function
    visitor = _OwnRaises()
    for statement in definition.body:
        visitor.visit(statement)
    found = {_exception_class(node.exc, function.__globals__) for node in visitor.found if node.exc is not None}
    if NotImplementedError in found and _is_placeholder(definition.body):
        found.discard(NotImplementedError)
    return found - {None}


def undocumented_raises() -> list[str]:
    """``"qualified.name: ErrorClass"`` for each raise the docstring autodoc shows has no field for."""
    misses, seen = [], set()
    for label, function, docstring in _public_callables():
        documented = set(RAISES.findall(docstring))
        for error in raised_classes(function):
            key = (id(inspect.unwrap(function)), error, docstring)  # a mixin's method on two pages: listed once
            if error.__name__ not in documented and key not in seen:
                misses.append(f"{label}: {error.__name__}")
                seen.add(key)
    return sorted(misses)


def test_the_raise_rule_counts_what_it_says():
    checked = {label for label, _, _ in _public_callables()}
    for expected in ("framework.callbacks.EarlyStopping.__init__", "framework.Module.log", "framework.seed_everything",
                     "framework.Module.trainer", "framework.accelerate.Accelerator.prepare_scheduler"):
        assert expected in checked
    from framework.callbacks import BaseFinetuning, EarlyStopping
    from framework.errors import MisconfigurationError
    from framework.io import AsyncCheckpointIO
    from framework.module_logging import LoggingMethods

    assert raised_classes(EarlyStopping.__init__) == {MisconfigurationError}
    assert raised_classes(LoggingMethods.log) == {MisconfigurationError}  # through errors.unloggable_value
    assert raised_classes(BaseFinetuning.freeze_before_training) == set()  # a placeholder for a subclass
    assert raised_classes(AsyncCheckpointIO.wait) == set()  # `raise job.error`: a caught error raised again


def test_a_public_callable_that_raises_has_a_raises_field():
    misses = undocumented_raises()
    assert not misses, (
        f"{len(misses)} raise(s) without a `:raises ErrorClass:` field in the docstring the reference shows (a "
        "constructor's: the class docstring; the rule is in tests/docs/test_docstrings.py):\n" + "\n".join(misses)
    )
