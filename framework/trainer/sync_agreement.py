"""The ranks' agreement at an epoch's end on which logged values to sync, so they all run the same collectives.

Each rank logs what its own batches logged. A rank with no evaluation batches (its part of a
small set is empty) or whose code skipped a ``self.log`` has no entry for a name the others
synced: its epoch end would skip a collective they wait in. Before the epoch values are
computed, the ranks exchange descriptions of their syncing entries, and a rank missing one
gets a stand-in that joins the same collective with a value that changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from framework.errors import MisconfigurationError
from framework.trainer.results import EMPTY, LoggedValue, Results


def agreed_entries(results: Results, gather: Callable[[Any], list[Any]], module: Any) -> list[LoggedValue]:
    """``results.entries()``, with those whose epoch value syncs the same, in the same order, on every rank.

    A stand-in is an empty value for a ``sync_dist`` number, and for a torchmetrics Metric the
    Module's own Metric (found by its attribute path in ``module``), whose list states are given
    the shape and dtype the other ranks' have, so its ``compute`` gathers alongside theirs.
    """
    groups = (results.batch_entries, results.epoch_entries)
    described = [[_describe(e, module) for e in group.values() if _syncs_epoch_value(e)] for group in groups]
    everyone = gather(described)
    agreed: list[LoggedValue] = []
    for index, group in enumerate(groups):
        agreed.extend(e for e in group.values() if not _syncs_epoch_value(e))
        seen: set[str] = set()
        for rank_described in everyone:
            for description in rank_described[index]:
                key = description["key"]
                if key in seen:
                    continue
                seen.add(key)
                _check_reachable(description, [by_rank[index] for by_rank in everyone])  # on every rank alike
                entry = group.get(key)
                if entry is None:  # kept, so results.reset() resets a Metric whose compute() cached its value
                    entry = group[key] = _stand_in(description, module)
                if description["dtype"] is not None:
                    entry.empty_dtype = description["dtype"]
                agreed.append(entry)
    return agreed


def _syncs_epoch_value(entry: LoggedValue) -> bool:
    """Whether computing the entry's epoch value runs a collective (a ``sync_dist`` number, or a Metric's compute)."""
    if not entry.on_epoch:
        return False
    if entry.metric is not None:
        return bool(getattr(entry.metric, "sync_on_compute", True))
    return entry.sync_dist and entry.reduce in EMPTY


def _describe(entry: LoggedValue, module: Any) -> dict[str, Any]:
    """What another rank needs to stand in for ``entry``: its settings, its value's dtype, a Metric's whereabouts."""
    metric = None
    if entry.metric is not None:
        path = next((name for name, sub in module.named_modules() if sub is entry.metric), None)
        metric = {"path": path, "list_states": _list_state_layout(entry.metric)}
    return {"key": entry.key, "name": entry.name, "suffix": entry.suffix, "on_step": entry.on_step,
            "prog_bar": entry.prog_bar, "logger": entry.logger, "reduce": entry.reduce,
            "dtype": entry.value_dtype() if entry.metric is None else None, "metric": metric}


def _check_reachable(description: dict[str, Any], described_by_rank: list[list[dict[str, Any]]]) -> None:
    """A Metric the Module does not hold cannot be stood in for: every rank fails alike rather than wait."""
    if description["metric"] is None or description["metric"]["path"] is not None:
        return
    key = description["key"]
    if any(all(other["key"] != key for other in rank) for rank in described_by_rank):
        raise MisconfigurationError(
            f"self.log({key!r}, metric) got a torchmetrics Metric that is not an attribute of the Module, and a "
            "rank that had no batch to log it in cannot join its sync. Make the Metric an attribute of the "
            "Module (self.metric = Metric() in __init__)."
        )


def _stand_in(description: dict[str, Any], module: Any) -> LoggedValue:
    d, metric = description, description["metric"]
    entry = LoggedValue(d["name"], d["suffix"], d["on_step"], True, d["prog_bar"], d["logger"], d["reduce"],
                        sync_dist=metric is None)
    if metric is not None:
        entry.metric = module.get_submodule(metric["path"])
        _give_empty_list_states(entry.metric, metric["list_states"])
    entry.standing_in = True
    return entry


def _list_state_layout(metric: Any) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    """Each non-empty list state's dtype and shape after the first dimension (what its gather concatenates)."""
    layout = {}
    for name, value in getattr(metric, "metric_state", {}).items():
        if isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
            layout[name] = (value[0].dtype, tuple(value[0].shape[1:]))
    return layout


def _give_empty_list_states(metric: Any, layout: dict[str, tuple[torch.dtype, tuple[int, ...]]]) -> None:
    """Empty list states shaped as the other ranks' (torchmetrics' own stand-in is 1-d float, which a gather of
    2-d or integer states cannot match)."""
    for name, (dtype, trailing) in layout.items():
        if not getattr(metric, name):
            setattr(metric, name, [torch.empty((0, *trailing), dtype=dtype, device=metric.device)])
