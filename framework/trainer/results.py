"""What ``self.log`` stores: per-name step values and epoch accumulators, kept as tensors.

Nothing here calls ``.item()`` or synchronises devices; values become floats only when
the trainer hands them to loggers (every ``log_every_n_steps``) or an epoch ends.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import torch

from framework.errors import MisconfigurationError, describe, unloggable_value
from framework.nested import extract_batch_size

REDUCTIONS = ("mean", "sum", "max", "min")
# Step values are appended to a list and folded into one tensor only every so often: a
# list append costs far less than a tensor operation on every step.
_FOLD_EVERY = 1024
_HALF_DTYPES = (torch.float16, torch.bfloat16)
# What a rank that logged nothing adds to a synced epoch value (a mean syncs its total and weight).
EMPTY = {"mean": 0.0, "sum": 0.0, "max": -math.inf, "min": math.inf}
_TORCH_REDUCTIONS = {
    torch.mean: "mean", torch.sum: "sum", torch.max: "max", torch.min: "min", max: "max", min: "min", sum: "sum",
}


class LoggedValue:
    """One logged name in one loop: its settings, its latest step value and its epoch accumulator."""

    __slots__ = (
        "name", "suffix", "key", "on_step", "on_epoch", "prog_bar", "logger", "reduce", "reduce_fx", "sync_dist",
        "step_value", "step_stamp", "pending", "weights", "folded", "folded_weight", "metric", "given", "empty_dtype",
        "standing_in", "loaders",
    )

    def __init__(self, name: str, suffix: str, on_step: bool, on_epoch: bool, prog_bar: bool, logger: bool,
                 reduce_fx: str | Callable, sync_dist: bool) -> None:
        self.name = name
        self.suffix = suffix  # "/dataloader_idx_N" when logged from one of several loaders
        self.key = name + suffix
        self.on_step = on_step
        self.on_epoch = on_epoch
        self.prog_bar = prog_bar
        self.logger = logger
        self.reduce_fx = reduce_fx
        self.reduce = reduce_fx if isinstance(reduce_fx, str) else "callable"
        self.sync_dist = sync_dist
        self.step_value: Any = None
        self.step_stamp = -1
        self.pending: list[Any] = []
        self.weights: list[float] = []
        self.folded: torch.Tensor | None = None
        self.folded_weight = 0.0
        self.metric: Any = None
        self.given: tuple = ()  # the last self.log arguments checked: a call repeating them skips the check
        self.empty_dtype = torch.float32  # the dtype the other ranks' values have, where this rank logged none
        self.standing_in = False  # this rank logged nothing under the name: the entry joins the others' sync
        self.loaders: set[int] = set()  # the loaders it was logged from without a suffix (add_dataloader_idx=False)

    def add(self, value: Any, weight: float) -> None:
        """Accumulate one batch's ``value`` for the epoch, with ``weight`` (the batch size for means)."""
        pending = self.pending
        pending.append(value)
        self.weights.append(weight)
        if len(pending) >= _FOLD_EVERY and self.reduce != "callable":
            self._fold()

    def _fold(self) -> None:
        values = _stack(self.pending)
        weights = self.weights
        if self.reduce == "mean":
            w = torch.tensor(weights, dtype=values.dtype, device=values.device)
            part = (values * w).sum()
        elif self.reduce == "sum":
            part = values.sum()
        elif self.reduce == "max":
            part = values.max()
        else:
            part = values.min()
        if self.folded is None:
            self.folded = part
        elif self.reduce in ("mean", "sum"):
            self.folded = self.folded + part
        elif self.reduce == "max":
            self.folded = torch.maximum(self.folded, part)
        else:
            self.folded = torch.minimum(self.folded, part)
        self.folded_weight += sum(weights)
        self.pending, self.weights = [], []

    def epoch_value(self, sync: Callable[[torch.Tensor, str], torch.Tensor]) -> torch.Tensor | None:
        """The epoch's reduced value (synced across ranks when ``sync_dist``), or None if nothing was logged."""
        if self.metric is not None:
            if not self.standing_in:
                return self.metric.compute()
            with warnings.catch_warnings():  # torchmetrics warns of a compute before any update: expected here
                warnings.simplefilter("ignore", UserWarning)
                return self.metric.compute()
        if self.reduce == "callable":
            if not self.pending:
                return None
            return torch.as_tensor(self.reduce_fx(_stack(self.pending)))
        if self.pending:
            self._fold()
        if self.folded is None:
            if not self.sync_dist or self.reduce not in EMPTY:
                return None
            # logged on other ranks only: join their collectives with a value that changes nothing
            self.folded = torch.tensor(EMPTY[self.reduce], dtype=self.empty_dtype)
        total = self.folded
        if self.reduce == "mean":
            weight = torch.tensor(self.folded_weight, dtype=total.dtype, device=total.device)
            if self.sync_dist:
                total, weight = sync(total, "sum"), sync(weight, "sum")
            return total / weight
        return sync(total, self.reduce) if self.sync_dist else total

    def value_dtype(self) -> torch.dtype | None:
        """The dtype of this epoch's accumulated values (None when nothing was logged)."""
        if self.pending:
            self._fold()
        return self.folded.dtype if self.folded is not None else None

    _SAVED = ("name", "suffix", "on_step", "on_epoch", "prog_bar", "logger", "reduce_fx", "sync_dist", "step_value",
              "step_stamp", "pending", "weights", "folded", "folded_weight", "standing_in")

    def state(self) -> dict[str, Any] | None:
        """This entry as plain data (``from_state`` makes it again); None for one holding a Metric or a callable."""
        if self.metric is not None or self.reduce == "callable":
            return None
        return {**{name: getattr(self, name) for name in self._SAVED}, "loaders": sorted(self.loaders),
                "empty_dtype": str(self.empty_dtype).removeprefix("torch.")}

    @classmethod
    def from_state(cls, fields: dict[str, Any]) -> LoggedValue:
        """The entry ``state()`` described."""
        entry = cls(fields["name"], fields["suffix"], fields["on_step"], fields["on_epoch"], fields["prog_bar"],
                    fields["logger"], fields["reduce_fx"], fields["sync_dist"])
        for name in cls._SAVED[8:]:
            setattr(entry, name, fields[name])
        entry.loaders = set(fields["loaders"])
        entry.empty_dtype = getattr(torch, fields["empty_dtype"])
        return entry

    def reset_epoch(self) -> None:
        """Empty the epoch accumulator (and reset a logged Metric)."""
        self.pending, self.weights, self.folded, self.folded_weight = [], [], None, 0.0
        if self.metric is not None:
            self.metric.reset()


def _stack(values: list[Any]) -> torch.Tensor:
    device = next((v.device for v in values if isinstance(v, torch.Tensor)), None)
    stacked = torch.stack([torch.as_tensor(v, device=device).reshape(()) for v in values])
    return stacked if stacked.is_floating_point() else stacked.float()


class Results:
    """Everything logged in one loop (training, validation, test) since its epoch began.

    Entries logged while a batch runs and those logged in the epoch hooks are kept apart: a
    name logged per step in ``training_step`` and again in ``on_train_epoch_end`` is two
    entries with their own settings, as Lightning keeps one per hook; where both show, the
    epoch hook's wins.
    """

    def __init__(self, training: bool, distributed: bool = False) -> None:
        self.training = training
        self.distributed = distributed  # several ranks: sync_dist means a collective
        self.batch_entries: dict[str, LoggedValue] = {}
        self.epoch_entries: dict[str, LoggedValue] = {}
        self.batch: Any = None
        self.batch_size: int | None = None
        self.stamp = 0
        self.in_batch = False
        self.dataloader_idx: int | None = None
        # With several ranks: reduces a sync_dist step value across ranks when logged (in evaluation, only in
        # the batches every rank runs).
        self.step_sync: Callable[[torch.Tensor, str], torch.Tensor] | None = None

    def logged_from(self, key: str) -> set[int]:
        """The loaders ``key`` was logged from without a suffix (empty: from none in particular)."""
        entry = self.batch_entries.get(key) or self.epoch_entries.get(key)
        return entry.loaders if entry is not None else set()

    def start_batch(self, batch: Any, dataloader_idx: int | None = None) -> None:
        """A new batch begins: what is logged next belongs to it (and to loader ``dataloader_idx``)."""
        self.batch = batch
        self.batch_size = None
        self.stamp += 1
        self.in_batch = True
        self.dataloader_idx = dataloader_idx

    def log(self, name: str, value: Any, prog_bar: bool, logger: bool | None, on_step: bool | None,
            on_epoch: bool | None, reduce_fx: str | Callable, sync_dist: bool, add_dataloader_idx: bool,
            batch_size: int | None) -> None:
        """Record one ``self.log`` call (see ``Module.log``); the first call for a name fixes its settings."""
        if self.dataloader_idx is None or not add_dataloader_idx:
            suffix, key = "", name
        else:
            suffix = f"/dataloader_idx_{self.dataloader_idx}"
            key = name + suffix
        entries = self.batch_entries if self.in_batch else self.epoch_entries
        entry = entries.get(key)
        given = (prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist)
        if entry is None:
            if add_dataloader_idx and "/dataloader_idx_" in name:  # the suffix is the loop's to add, as Lightning says
                raise MisconfigurationError(
                    f"self.log({name!r}, ...): the name holds a '/dataloader_idx_' suffix, which is added for you "
                    "with several loaders. Drop it from the name, or pass add_dataloader_idx=False.")
            entry = entries[key] = self._new_entry(name, suffix, value, given)
        elif entry.given != given:  # spelled differently: compare what the settings resolve to
            self._check_same_settings(key, entry, given)
        if not suffix and self.dataloader_idx is not None:  # results list it only for the loaders it came from
            entry.loaders.add(self.dataloader_idx)
        if entry.metric is not None:
            # A Metric's epoch value is its compute(); its step value is the batch value of forward().
            if entry.on_step:
                entry.step_value = getattr(entry.metric, "_forward_cache", None)
                entry.step_stamp = self.stamp if entry.step_value is not None else -1
            return
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise MisconfigurationError(
                    f"self.log({name!r}, value) needs a single number; got a tensor of shape {tuple(value.shape)}. "
                    "Reduce it first (e.g. value.mean()) or log a torchmetrics Metric."
                )
            if value.requires_grad:
                value = value.detach()
            if value.dtype in _HALF_DTYPES:  # epoch means of many fp16/bf16 values would lose digits
                value = value.float()
        elif not isinstance(value, (int, float)):
            raise unloggable_value(name, value)
        if entry.on_step:
            synced = entry.sync_dist and self.step_sync is not None and entry.reduce != "callable"
            entry.step_value = self.step_sync(torch.as_tensor(value), entry.reduce) if synced else value
            entry.step_stamp = self.stamp
        if entry.on_epoch:
            if batch_size is None and entry.reduce == "mean":
                batch_size = self.current_batch_size()
            entry.add(value, batch_size or 1)

    def _new_entry(self, name: str, suffix: str, value: Any, given: tuple) -> LoggedValue:
        if not isinstance(name, str) or not name:
            raise MisconfigurationError(f"self.log(name=...) needs a non-empty string; got {describe(name)}.")
        prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist = self._resolve(name + suffix, given)
        if not self.in_batch and (on_step or not on_epoch):
            # Lightning refuses this too: an epoch-level hook has no step for the value to be logged at.
            setting = "on_step=True" if on_step else "on_epoch=False"
            raise MisconfigurationError(
                f"self.log({name!r}, ..., {setting}) in an epoch-level hook (on_*_start, on_*_epoch_start/end): "
                "there is no step there to log at. Drop the argument (on_epoch=True is the default there), or log "
                "it in a step or batch hook."
            )
        entry = LoggedValue(name, suffix, on_step, on_epoch, prog_bar, logger, reduce_fx, sync_dist)
        if self.distributed and sync_dist and entry.reduce == "callable" and not is_metric(value):
            raise MisconfigurationError(
                f"self.log({name + suffix!r}, ..., reduce_fx={describe(reduce_fx)}, sync_dist=True): a reduce_fx of "
                f"your own cannot be applied across ranks. Use one of {', '.join(map(repr, REDUCTIONS))}, or log a "
                "torchmetrics Metric, which syncs itself."
            )
        entry.given = given
        if is_metric(value):
            entry.metric = value
        return entry

    def _resolve(self, key: str, given: tuple) -> tuple:
        """What ``self.log``'s (prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist) mean here."""
        prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist = given
        step_default = self.training and self.in_batch
        return (
            bool(prog_bar),
            True if logger is None else bool(logger),
            step_default if on_step is None else bool(on_step),
            (not step_default) if on_epoch is None else bool(on_epoch),
            _reduction(key, reduce_fx),
            bool(sync_dist),
        )

    def _check_same_settings(self, key: str, entry: LoggedValue, given: tuple) -> None:
        """A name keeps its settings (as Lightning requires); only the spelling may change."""
        first = (entry.prog_bar, entry.logger, entry.on_step, entry.on_epoch, entry.reduce_fx, entry.sync_dist)
        names = ("prog_bar", "logger", "on_step", "on_epoch", "reduce_fx", "sync_dist")
        changed = [
            f"{n}={new!r} (first {old!r})"
            for n, old, new in zip(names, first, self._resolve(key, given), strict=True)
            if not (old == new or _same_code(old, new))
        ]
        if changed:
            raise MisconfigurationError(
                f"self.log({key!r}, ...) was called again with other settings: {', '.join(changed)}. A name keeps "
                "one set of settings in the step functions and batch hooks (and one in the epoch hooks); log the "
                "other variant under another name."
            )
        entry.given = given  # the next call spelled this way takes the fast path

    def current_batch_size(self) -> int:
        """The current batch's size, found by ``extract_batch_size`` once per batch."""
        if self.batch_size is None:
            self.batch_size = extract_batch_size(self.batch)
        return self.batch_size

    def step_values(self) -> list[LoggedValue]:
        """Entries logged with ``on_step=True`` during the current batch."""
        stamp = self.stamp
        return [e for e in self.entries() if e.on_step and e.step_stamp == stamp]

    def entries(self) -> list[LoggedValue]:
        """Every entry: the batch-time ones, then the epoch hooks' (so theirs win where names clash)."""
        return [*self.batch_entries.values(), *self.epoch_entries.values()]

    def state_dict(self) -> dict[str, Any]:
        """The epoch's accumulators and step values as plain data, for a checkpoint saved inside an epoch: the
        run resumed from it gives the epoch the same values, to the bit. Entries a checkpoint cannot hold (a
        logged torchmetrics ``Metric``, a callable ``reduce_fx``) are left out: they restart from the resume."""
        return {"stamp": self.stamp, "in_batch": self.in_batch, "batch_entries": _saved_entries(self.batch_entries),
                "epoch_entries": _saved_entries(self.epoch_entries)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take back what ``state_dict`` returned."""
        self.stamp, self.in_batch = int(state["stamp"]), bool(state["in_batch"])
        for entries, kind in ((self.batch_entries, "batch_entries"), (self.epoch_entries, "epoch_entries")):
            saved = state[kind]
            entries.clear()
            for key, fields in saved.items():
                entries[key] = LoggedValue.from_state(fields)

    def reset(self) -> None:
        """Forget every entry (resetting logged Metrics), so the next epoch starts empty."""
        for entry in self.entries():
            entry.reset_epoch()
        self.batch_entries.clear()
        self.epoch_entries.clear()
        self.in_batch = False
        self.dataloader_idx = None


def _saved_entries(entries: dict[str, LoggedValue]) -> dict[str, dict[str, Any]]:
    states = {key: entry.state() for key, entry in entries.items()}
    return {key: state for key, state in states.items() if state is not None}


def _reduction(key: str, reduce_fx: Any) -> str | Callable:
    """``reduce_fx`` as one of ``REDUCTIONS`` when it names one (any case, "avg", torch.mean ...), else the callable."""
    if isinstance(reduce_fx, str):
        name = reduce_fx.lower()
        name = "mean" if name == "avg" else name
        if name in REDUCTIONS:
            return name
    elif callable(reduce_fx):
        try:
            return _TORCH_REDUCTIONS.get(reduce_fx, reduce_fx)
        except TypeError:  # an unhashable callable object
            return reduce_fx
    shown = repr(reduce_fx) if isinstance(reduce_fx, str) else describe(reduce_fx)
    raise MisconfigurationError(
        f"self.log({key!r}, reduce_fx={shown}): accepted are {', '.join(map(repr, REDUCTIONS))} or a callable."
    )


def _same_code(a: Any, b: Any) -> bool:
    """Two reductions written as the same function (a lambda in training_step is a new object each call)."""
    return callable(a) and callable(b) and getattr(a, "__code__", a) is getattr(b, "__code__", b)


def is_metric(value: Any) -> bool:
    """Whether ``value`` is a torchmetrics Metric (or quacks like one), without importing torchmetrics."""
    return hasattr(value, "compute") and hasattr(value, "update") and hasattr(value, "reset")
