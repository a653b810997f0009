"""Letting go of the references torch keeps to process groups after they were destroyed.

``dist.destroy_process_group()`` unregisters the groups, but a gloo group's C++ object, and with it its three
worker threads, lives as long as a Python object references it. Parts of ``torch.distributed`` keep such
references past the destroy:

- default arguments evaluated when their module was imported: one imported after the group started holds
  ``dist.group.WORLD`` (``ZeroRedundancyOptimizer``'s ``_broadcast_object``, ``torch.distributed.nn``'s functions);
- a ``DeviceMesh`` keeps its groups in ``_pg_registry``, and DTensor's sharding caches keep the meshes of every
  operation they saw (FSDP2, tensor parallel);
- FSDP2's mesh infos keep the group they shard over (``shard_process_group``), as long as the model lives.

Left alive into the interpreter's finalization, a worker thread that lets go of a finished collective takes the
GIL and is ended by ``pthread_exit``, which aborts the rank after its work was done ("terminate called without an
active exception", SIGABRT, a failed launch; seen under load). Dropping the references right after the destroy
ends the threads while the interpreter is whole (torch's holder joins them with the GIL released).

Only objects of ``torch.distributed`` and its functions are changed, and only references to groups that are no
longer registered: nothing can use those any more. A default argument becomes None, which torch reads as the
default group, as it would have been had the module been imported before the group started.

Example::

    dist.destroy_process_group()
    let_go_of_destroyed_groups()  # no gloo thread left
"""

from __future__ import annotations

import gc
import types
from typing import Any

import torch.distributed as dist

_OWNER = "torch.distributed"


def let_go_of_destroyed_groups() -> int:
    """Replace ``torch.distributed``'s references to unregistered process groups (by None, or by leaving them out
    of the dicts that hold them); how many were dropped. About 0.1 s: it looks at every object Python tracks."""
    from torch.distributed import distributed_c10d

    live = {id(group) for group in distributed_c10d._world.pg_map}

    def destroyed(value: Any) -> bool:
        return isinstance(value, dist.ProcessGroup) and id(value) not in live

    dropped = 0
    owned_types: dict[type, bool] = {}  # most of the many objects are of a few types
    for obj in gc.get_objects():
        kind = type(obj)
        if kind is types.FunctionType:
            if (obj.__defaults__ or obj.__kwdefaults__) and _owned(obj.__module__):
                dropped += _drop_from_defaults(obj, destroyed)
            continue
        owned = owned_types.get(kind)
        if owned is None:
            owned = owned_types[kind] = _owned(getattr(kind, "__module__", None))
        if owned:
            try:  # past a class's own __getattribute__ (torch.distributed.reduce_op's warns)
                attributes = object.__getattribute__(obj, "__dict__")
            except (AttributeError, TypeError):
                continue
            if isinstance(attributes, dict):
                dropped += _drop_from_attributes(attributes, destroyed)
    return dropped


def _owned(module: Any) -> bool:
    return isinstance(module, str) and (module == _OWNER or module.startswith(_OWNER + "."))


def _drop_from_defaults(function: types.FunctionType, destroyed: Any) -> int:
    dropped = sum(destroyed(value) for value in function.__defaults__ or ())
    if dropped:
        function.__defaults__ = tuple(None if destroyed(value) else value for value in function.__defaults__)
    keywords = function.__kwdefaults__
    if keywords:
        for name in [name for name, value in keywords.items() if destroyed(value)]:
            keywords[name] = None
            dropped += 1
    return dropped


def _drop_from_attributes(attributes: dict[str, Any], destroyed: Any) -> int:
    """Attributes that are destroyed groups become None; dicts and lists held in attributes lose them."""
    dropped = 0
    for name, value in list(attributes.items()):
        if destroyed(value):
            attributes[name] = None  # past any property or frozen dataclass: the group cannot be used anyway
            dropped += 1
        elif isinstance(value, dict):
            for key in [key for key, inner in value.items() if destroyed(inner)]:
                del value[key]
                dropped += 1
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                if destroyed(inner):
                    value[index] = None
                    dropped += 1
    return dropped
