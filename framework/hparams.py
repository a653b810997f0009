"""``save_hyperparameters``: capture a constructor's arguments, and keep them checkpoint-safe; the hyperparameter
methods the Module and the DataModule share (``HyperparametersMixin``, as Lightning names it)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import os
import warnings
from argparse import Namespace
from collections.abc import Mapping
from enum import Enum
from pathlib import PurePath
from types import FrameType
from typing import Any

import torch

from framework.errors import MisconfigurationError


class AttributeDict(dict):
    """A dict whose keys read as attributes too: ``hparams.lr`` is ``hparams["lr"]``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"No hyperparameter named {name!r}; saved: {sorted(self)}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

class HyperparametersMixin:
    """``hparams``, ``hparams_initial`` and ``save_hyperparameters``, for the Module and the DataModule."""

    # No class-level annotations of the attributes: TorchScript would take them for the Module's attribute types.

    def _forget_hyperparameters(self) -> None:
        """None saved yet, and none to log (until ``save_hyperparameters(logger=True)``, as Lightning)."""
        self._hparams = AttributeDict()
        self._hparams_initial = AttributeDict()
        self._hparams_name = "kwargs"
        self._log_hyperparams = False

    @property
    def hparams(self) -> AttributeDict:
        """What ``save_hyperparameters`` stored, readable as attributes (``self.hparams.lr``)."""
        return self._hparams

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of ``hparams`` as ``save_hyperparameters`` stored them (what the loggers receive), unaffected by
        later changes to ``hparams``."""
        return copy_of(self._hparams_initial)

    def save_hyperparameters(self, *args: Any, ignore: str | list[str] | None = None, logger: bool = True,
                             frame: Any = None) -> None:
        """Store the ``__init__`` arguments in ``self.hparams`` (saved in checkpoints, sent to the loggers).

        With no ``args`` every argument is kept; with names only those; with one dict (or
        Namespace) that dict. ``ignore`` leaves names out (e.g. a backbone module).

        :param ignore: a name or a list of names to leave out; ``None`` (the default): none.
        :param logger: ``True`` (the default): the loggers receive them when a run starts (with the Trainer's
            ``enable_autolog_hparams``); ``False``: stored and checkpointed only.
        :param frame: the stack frame to look for ``__init__`` calls from, upwards; ``None`` (default): the caller's.
        """
        caller = frame if frame is not None else inspect.currentframe().f_back
        self._hparams, self._hparams_name = chosen_hyperparameters(caller, self, args, ignore)
        self._hparams_initial = copy_of(self._hparams)
        self._log_hyperparams = logger


def init_arguments(frame: FrameType | None, obj: object) -> dict[str, Any]:
    """The arguments of every ``__init__`` of ``obj`` on the stack from ``frame`` up; the subclass's win."""
    collected: dict[str, Any] = {}
    while frame is not None:
        code = frame.f_code  # the instance is __init__'s first argument, whatever its name
        if code.co_name == "__init__" and code.co_argcount and frame.f_locals.get(code.co_varnames[0]) is obj:
            info = inspect.getargvalues(frame)
            found = {name: info.locals[name] for name in info.args[1:] if name in info.locals}
            if info.keywords:
                found.update(info.locals.get(info.keywords) or {})
            collected = {**found, **collected}
        frame = frame.f_back
    return collected


def chosen_hyperparameters(frame: FrameType | None, obj: object, args: tuple[Any, ...],
                           ignore: str | list[str] | None) -> tuple[AttributeDict, str]:
    """What ``save_hyperparameters(*args, ignore=...)`` called from ``frame`` stores, and the name it came in as.

    No ``args``: every ``__init__`` argument; names: those; one dict or Namespace: its items
    (the name is then the ``__init__`` argument that passed it, so loading can pass it back).
    """
    init_args = init_arguments(frame, obj)
    name = "kwargs"
    if len(args) == 1 and not isinstance(args[0], str):
        source = args[0]
        chosen = dict(vars(source) if not isinstance(source, Mapping) else source)
        name = next((arg for arg, value in init_args.items() if value is source), "kwargs")
    elif args:
        missing = [arg for arg in args if arg not in init_args]
        if missing:
            raise MisconfigurationError(
                f"save_hyperparameters{args!r}: {missing} are not arguments of __init__; they are: {sorted(init_args)}."
            )
        chosen = {arg: init_args[arg] for arg in args}
    else:
        chosen = init_args
    ignored = {ignore} if isinstance(ignore, str) else set(ignore or ())
    return AttributeDict({k: v for k, v in chosen.items() if k not in ignored}), name


def copy_of(hparams: AttributeDict) -> AttributeDict:
    """A deep copy (a value that cannot be deep-copied, e.g. one holding a lock, is shared instead)."""
    try:
        return copy.deepcopy(hparams)
    except Exception:  # noqa: BLE001 - any failure of a user object's __deepcopy__
        return AttributeDict(hparams)


def checkpoint_safe(hparams: dict[str, Any]) -> dict[str, Any]:
    """The hyperparameters in a form that loads with ``torch.load(weights_only=True)``.

    Paths become strings, enums their values, Namespaces, mappings and dataclasses dicts; a
    value with no such form (a module, a function, an arbitrary object) is left out with a
    warning naming its key.

    Example::

        checkpoint_safe({"root": Path("data"), "layers": (2, 3)})  # {"root": "data", "layers": (2, 3)}
    """
    safe = {}
    for key, value in hparams.items():
        plain = _plain_form(value)
        if plain is not _NO_PLAIN_FORM:
            safe[key] = plain
        else:
            warnings.warn(
                f"Hyperparameter {key!r} ({type(value).__qualname__}) is not saved in checkpoints: a checkpoint holds "
                "only numbers, strings, None, tensors, dtypes and devices, and lists, tuples, sets and dicts of them, "
                "so that it loads without unpickling code. Pass it again to load_from_checkpoint(..., "
                f"{key}=...), or leave it out with save_hyperparameters(ignore=[{key!r}]).",
                stacklevel=3,
            )
    return safe


_NO_PLAIN_FORM = object()
_LOADABLE = (bool, int, float, str, torch.dtype, torch.device, torch.Size)


def _plain_form(value: Any) -> Any:
    """``value`` as data ``torch.load(weights_only=True)`` reads back, or ``_NO_PLAIN_FORM``."""
    if value is None or isinstance(value, _LOADABLE):
        return value
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, Enum):
        return _plain_form(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Namespace):
        value = vars(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        items = {key: _plain_form(item) for key, item in value.items()}
        keys_loadable = all(isinstance(key, (str, int)) for key in items)
        complete = keys_loadable and all(item is not _NO_PLAIN_FORM for item in items.values())
        return items if complete else _NO_PLAIN_FORM
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_plain_form(item) for item in value]
        if any(item is _NO_PLAIN_FORM for item in items):
            return _NO_PLAIN_FORM
        if isinstance(value, tuple):
            return tuple(items)
        return items if isinstance(value, list) else set(items)
    return _NO_PLAIN_FORM


def yaml_form(value: Any) -> Any:
    """``value`` with everything YAML cannot hold safely replaced by its ``repr`` (numbers and strings stay)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(key): yaml_form(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [yaml_form(item) for item in value]
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # a 0-d tensor or NumPy scalar
        return value.item()
    return repr(value)


def read_hparams_file(path: str | os.PathLike) -> dict[str, Any]:
    """The hyperparameters in a YAML file (``hparams.yaml``, as loggers write), for ``load_from_checkpoint``."""
    import yaml

    from framework.io.fs import read_bytes

    if not str(path).lower().endswith((".yaml", ".yml")):
        raise MisconfigurationError(f"hparams_file={os.fspath(path)!r}: accepted is a .yaml or .yml file.")
    loaded = yaml.safe_load(read_bytes(path)) or {}
    if not isinstance(loaded, dict):
        raise MisconfigurationError(f"hparams_file={os.fspath(path)!r} holds {type(loaded).__name__}, not a mapping.")
    return loaded


def build_from_hparams(cls: type, hparams: dict[str, Any], overrides: dict[str, Any],
                       hparams_name: str = "kwargs") -> Any:
    """``cls(**hparams, **overrides)``, keeping only the saved names ``cls.__init__`` takes.

    When the hyperparameters were saved from one dict or Namespace argument (``hparams_name``
    names it), they go back in as that argument, readable by key and by attribute.
    """
    if hparams_name != "kwargs" and hparams_name in inspect.signature(cls.__init__).parameters:
        arguments = {hparams_name: AttributeDict(hparams), **overrides}
    else:
        arguments = {**_accepted_by(cls, hparams), **overrides}
    try:
        return cls(**arguments)
    except TypeError as error:
        raise MisconfigurationError(
            f"{cls.__qualname__}.load_from_checkpoint could not call {cls.__qualname__}(**{sorted(arguments)}): "
            f"{error}. Pass the missing arguments as keyword overrides, or call save_hyperparameters() in __init__."
        ) from error


def _accepted_by(cls: type, hparams: dict[str, Any]) -> dict[str, Any]:
    """The saved hyperparameters ``cls.__init__`` takes (a base class's own ones are dropped)."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters):
        return dict(hparams)
    names = {p.name for p in parameters}
    return {key: value for key, value in hparams.items() if key in names}
