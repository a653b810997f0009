"""DeepSpeed's references to the process groups, let go once the groups are destroyed (a mixin of
``DeepSpeedStrategy``).

``dist.destroy_process_group()`` unregisters the groups, but a gloo group's C++ object, and with it its worker
threads, lives as long as something references it (its ``shutdown()`` and ``abort()`` leave the threads running).
DeepSpeed keeps the groups in its engine, its ZeRO optimizer, every ZeRO-3 parameter (``ds_process_group``) and the
globals of ``deepspeed.utils.groups``, so the threads ran on into the interpreter's finalization. There, a worker
thread that lets go of a finished collective (whose tensors are Python objects) takes the GIL, and a thread that
takes the GIL while the interpreter finalizes is ended by ``pthread_exit``, whose unwinding through a C++
destructor calls ``std::terminate``: "terminate called without an active exception", SIGABRT, a failed launch
after the rank's work was done. That happens when the thread gets a CPU again only after the main thread has gone
from its last collective to its exit, which a loaded machine makes likely. Let go of here, while the interpreter is
whole, the groups are destroyed, which joins their threads with the GIL released (torch's holder for process
groups), so the threads finish first.

Example::

    dist.destroy_process_group()  # every rank at its end
    let_go_of_groups(engine)      # no gloo thread left
"""

from __future__ import annotations

import contextlib
import gc
import sys
import types
from typing import Any

import torch.distributed as dist
from torch import nn


class LetsGoOfGroups:
    """``_leave_group`` (``ParallelStrategy``'s end of the process group) that then lets go of DeepSpeed's
    references to the groups, where they were destroyed."""

    engine: Any

    def _leave_group(self) -> None:
        super()._leave_group()  # type: ignore[misc]
        if not dist.is_initialized():  # not when a rank is missing: its peers learn it when this process ends
            let_go_of_groups(self.engine)


def let_go_of_groups(engine: Any) -> None:
    """Drop every reference to a process group held by DeepSpeed: in ``engine`` (a ``DeepSpeedEngine``, or None),
    its optimizer, modules and parameters, and DeepSpeed's module globals. Only once the groups are destroyed:
    the engine cannot communicate afterwards."""
    gc.collect()  # an engine of an earlier run, unreachable in a reference cycle, lets go of its groups this way
    waiting = [engine] if engine is not None else []
    for name in ("deepspeed.utils.groups", "deepspeed.comm.comm"):  # the second holds DeepSpeed's comm backend
        module = sys.modules.get(name)
        if module is not None:
            waiting.extend(_drop_groups_in(vars(module)))
    seen: set[int] = set()
    while waiting:
        obj = waiting.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, nn.Module):  # its submodules and parameters live in dicts of their own
            waiting.extend(obj.children())
            waiting.extend(obj.parameters(recurse=False))
        attributes = getattr(obj, "__dict__", None)
        if isinstance(attributes, dict):
            waiting.extend(_drop_groups_in(attributes))


def _drop_groups_in(attributes: dict[str, Any]) -> list[Any]:
    """Empty the entries of ``attributes`` that hold process groups (None for a group or a tuple of them; lists and
    dicts are emptied where they are, as DeepSpeed's code may still look into them); the DeepSpeed objects in the
    other entries, for the caller to look into."""
    inside = []
    for name, value in list(attributes.items()):
        if _holds_groups(value):
            if isinstance(value, (list, dict)):
                value.clear()
            else:
                attributes[name] = None
            continue
        values = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else (value,)
        held = [inner for item in values for inner in _behind(item)]
        inside.extend(item for item in held if type(item).__module__.startswith("deepspeed."))
    return inside


def _behind(value: Any) -> list[Any]:
    """``value``, and the objects a function or bound method holds: ZeRO-3 gives each parameter functions whose
    closures hold ``zero.Init``, which holds a group."""
    found = [value]
    if isinstance(value, types.MethodType):
        found.append(value.__self__)
        value = value.__func__
    if isinstance(value, types.FunctionType):
        for cell in value.__closure__ or ():
            with contextlib.suppress(ValueError):  # a cell not filled yet
                found.append(cell.cell_contents)
    return found


def _holds_groups(value: Any) -> bool:
    """A process group, or a list, tuple or dict of them (ZeRO's per-sub-group and per-expert groups)."""
    if isinstance(value, dist.ProcessGroup):
        return True
    items = list(value.values()) if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else []
    return bool(items) and all(isinstance(item, dist.ProcessGroup) for item in items)
