"""Lightning's ``utilities.parsing``: a constructor's arguments read from its frame, and attribute look-ups that
also search ``hparams`` and the DataModule.

Example::

    class Model(Module):
        def __init__(self, hidden: int = 32, lr: float = 0.1):
            super().__init__()
            self.init_args = get_init_args(inspect.currentframe())   # {"hidden": 32, "lr": 0.1}
"""

from __future__ import annotations

import inspect
import pickle
import types
from collections.abc import MutableMapping, Sequence
from typing import Any

from framework.hparams import AttributeDict
from framework.utilities.rank_zero import rank_zero_warn

__all__ = ["AttributeDict", "clean_namespace", "collect_init_args", "get_init_args", "is_picklable",
           "lightning_getattr", "lightning_hasattr", "lightning_setattr", "parse_class_init_keys",
           "save_hyperparameters", "str_to_bool"]

_NOT_ARGUMENTS = ("__class__", "frame", "frame_args")


def is_picklable(obj: object) -> bool:
    """Whether ``pickle.dumps(obj)`` works."""
    try:
        pickle.dumps(obj)
    except (pickle.PickleError, AttributeError, RuntimeError, TypeError):
        return False
    return True


def clean_namespace(hparams: MutableMapping) -> None:
    """Drop (with a warning each) the entries of ``hparams`` that cannot be pickled."""
    for key in [key for key, value in hparams.items() if not is_picklable(value)]:
        rank_zero_warn(f"Attribute {key!r} removed from hparams because it cannot be pickled. You can suppress this "
                       f"warning by setting `self.save_hyperparameters(ignore=[{key!r}])`.")
        del hparams[key]


def str_to_bool(value: str) -> bool:
    """``"yes"``, ``"true"``, ``"1"`` ... -> True; ``"no"``, ``"false"``, ``"0"`` ... -> False; else ValueError."""
    lowered = value.lower()
    if lowered in ("y", "yes", "t", "true", "on", "1"):
        return True
    if lowered in ("n", "no", "f", "false", "off", "0"):
        return False
    raise ValueError(f"str_to_bool({value!r}): accepted are yes/no, true/false, on/off, 1/0 (any case).")


def parse_class_init_keys(cls: type) -> tuple[str, str | None, str | None]:
    """The names ``cls.__init__`` gives ``self``, ``*args`` and ``**kwargs`` (None where it has none)."""
    parameters = list(inspect.signature(cls.__init__).parameters.values())  # type: ignore[misc]

    def first(kind: inspect._ParameterKind) -> str | None:
        return next((p.name for p in parameters if p.kind == kind), None)

    return parameters[0].name, first(inspect.Parameter.VAR_POSITIONAL), first(inspect.Parameter.VAR_KEYWORD)


def _self_and_arguments(frame: types.FrameType) -> tuple[Any, dict[str, Any]]:
    """The instance and the arguments of the ``__init__`` running in ``frame`` (one whose class uses
    ``super()`` or ``__class__``: Python keeps the class in its locals only then)."""
    local_vars = frame.f_locals
    if "__class__" not in local_vars:
        return None, {}
    cls = local_vars["__class__"]
    self_name, args_name, kwargs_name = parse_class_init_keys(cls)
    arguments = {name: local_vars[name] for name in inspect.signature(cls.__init__).parameters if name in local_vars}
    if kwargs_name:
        arguments.update(arguments.get(kwargs_name) or {})
    left_out = {self_name, args_name, kwargs_name, *_NOT_ARGUMENTS}
    return local_vars.get(self_name), {name: value for name, value in arguments.items() if name not in left_out}


def get_init_args(frame: types.FrameType) -> dict[str, Any]:
    """The arguments of the ``__init__`` running in ``frame`` (``inspect.currentframe()`` inside it), keyword
    arguments of ``**kwargs`` included; ``{}`` when ``frame`` is not such an ``__init__``."""
    return _self_and_arguments(frame)[1]


def collect_init_args(frame: types.FrameType, path_args: list[dict[str, Any]], inside: bool = False,
                      classes: tuple[type, ...] = ()) -> list[dict[str, Any]]:
    """``path_args`` with the arguments of each ``__init__`` in the chain of ``super().__init__()`` calls from
    ``frame`` outwards (only those of instances of ``classes``, when given); the last is the most derived class's."""
    current: types.FrameType | None = frame
    while current is not None and isinstance(current.f_back, types.FrameType):
        instance, arguments = _self_and_arguments(current)
        if "__class__" in current.f_locals and (not classes or isinstance(instance, classes)):
            path_args.append(arguments)
            inside = True
        elif inside:
            break
        current = current.f_back
    return path_args


def save_hyperparameters(obj: Any, *args: Any, ignore: Sequence[str] | str | None = None,
                         frame: types.FrameType | None = None) -> None:
    """``obj.save_hyperparameters(*args, ignore=ignore)`` as if called from ``frame`` (default: the caller's)."""
    obj.save_hyperparameters(*args, ignore=ignore, frame=frame or inspect.currentframe().f_back)


def _holders(model: Any, attribute: str) -> list[Any]:
    """Where ``attribute`` lives: the model, its ``hparams``, the Trainer's DataModule and its ``hparams``."""
    trainer = getattr(model, "_trainer", None)
    datamodule = getattr(trainer, "datamodule", None) if trainer is not None else None
    found = []
    for owner in (model, datamodule):
        if owner is None:
            continue
        if hasattr(owner, attribute):
            found.append(owner)
        if attribute in (getattr(owner, "hparams", None) or {}):
            found.append(owner.hparams)
    return found


def _missing(attribute: str) -> AttributeError:
    return AttributeError(f"{attribute} is neither an attribute of the model, nor in its hparams, nor in the "
                          "DataModule or its hparams.")


def lightning_hasattr(model: Any, attribute: str) -> bool:
    """Whether ``attribute`` is on ``model``, in ``model.hparams``, on the Trainer's DataModule or in its hparams."""
    return bool(_holders(model, attribute))


def lightning_getattr(model: Any, attribute: str) -> Any:
    """``attribute`` from the last of its holders (``lightning_hasattr``'s order), as Lightning reads it."""
    holders = _holders(model, attribute)
    if not holders:
        raise _missing(attribute)
    holder = holders[-1]
    return holder[attribute] if isinstance(holder, dict) else getattr(holder, attribute)


def lightning_setattr(model: Any, attribute: str, value: Any) -> None:
    """Set ``attribute`` to ``value`` in every one of its holders."""
    holders = _holders(model, attribute)
    if not holders:
        raise _missing(attribute)
    for holder in holders:
        if isinstance(holder, dict):
            holder[attribute] = value
        else:
            setattr(holder, attribute, value)
