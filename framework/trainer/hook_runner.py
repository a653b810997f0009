"""Calls hooks on callbacks, the DataModule and the Module, as the table in ``framework.hooks`` says.

Who overrides which hook is worked out once per run (``HookRunner``, each hook when first asked for); on the hot
path a hook nobody overrides costs one ``is None`` test. Everything that decides how a hook is called (who may
define it, whether it may log, whether the Module's default acts, batch-transfer hooks) is read from the ``Hook``
member; every hook the loops call goes through ``get`` (resolved before the batches start) or ``call``.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from framework.callbacks.base import Callback
from framework.datamodule import DataModule
from framework.errors import MisconfigurationError, describe
from framework.hooks import Hook, Owner, Trait, defines, overrides
from framework.module import Module
from framework.profilers.base import Profiler, profiled
from framework.protocols import TrainerLike


class HookRunner:
    """The overriding implementations of every hook of one run, bound once.

    ``runner.get(Hook.ON_TRAIN_BATCH_END)`` is a function taking the hook's Module-side arguments, or None when
    neither a callback, the DataModule nor the Module overrides the hook.
    """

    def __init__(self, trainer: TrainerLike, module: Module, callbacks: list[Callback], datamodule: DataModule | None,
                 profiler: Profiler | None = None) -> None:
        self.trainer = trainer  # the first argument of every callback hook
        self.module = module
        self.callbacks = callbacks
        self.datamodule = datamodule
        self._profiler = profiler  # each hook is timed under its name; None: not timed
        self._callers: dict[Hook, Callable[..., Any] | None] = {}  # each hook resolved when first asked for

    def get(self, hook: Hook, with_default: bool = False, timed: bool = True) -> Callable[..., Any] | None:
        """The function that runs ``hook`` (given its Module-side arguments), or None when there is nothing to run.

        ``with_default``: the Module's own implementation where nothing overrides it (a Module-only hook whose
        default the loop wants only sometimes, such as ``configure_gradient_clipping`` when clipping is asked for).
        ``timed=False``: not timed by the profiler, for a hook around a step the loop times under the same name
        (a Module's ``optimizer_step`` calls the optimizer step).
        """
        caller = self._resolved(hook) if timed else self._caller(hook)
        if caller is None and with_default:
            caller = self._refusing_logs(hook, getattr(self.module, hook.value))
            return profiled(self._profiler, hook.value, caller) if timed else caller
        return caller

    def all_default(self, *hooks: Hook) -> bool:
        """Whether nothing (Module, DataModule or callback) overrides any of ``hooks``."""
        owners = [(self.module, Module), (self.datamodule, DataModule), *((cb, Callback) for cb in self.callbacks)]
        return not any(obj is not None and overrides(obj, base, hook.value) for hook in hooks for obj, base in owners)

    def call(self, hook: Hook, *args: Any, only: Owner | None = None, **kwargs: Any) -> Any:
        """Run ``hook`` now; returns the Module's return value (None when it has none).

        ``only``: run only the Module's (``Owner.MODULE``) or only the callbacks' implementations, where the loop
        does work between them (loading a checkpoint: the Module's ``on_load_checkpoint``, the weights, then the
        callbacks').
        """
        caller = self._resolved(hook) if only is None else profiled(self._profiler, hook.value,
                                                                    self._caller(hook, only))
        return caller(*args, **kwargs) if caller is not None else None

    def _resolved(self, hook: Hook) -> Callable[..., Any] | None:
        try:
            return self._callers[hook]
        except KeyError:
            caller = self._callers[hook] = profiled(self._profiler, hook.value, self._caller(hook))
            return caller

    def call_epoch_end(self, hook: Hook, refresh: Callable[[], None] | None = None) -> None:
        """An epoch-end hook: callbacks that read epoch metrics run after the Module, which may log more.

        ``refresh`` runs before the callbacks and again after the Module (with several ranks: the
        epoch values are synced there, on every rank, so what callbacks read is synced and reading
        runs no collective).
        """
        readers = [cb for cb in self._overriding(hook) if cb.reads_epoch_metrics]
        if refresh is not None:
            refresh()
        for callback in self._overriding(hook):
            if not callback.reads_epoch_metrics:
                getattr(callback, hook.value)(self.trainer, self.module)
        if overrides(self.module, Module, hook.value):
            getattr(self.module, hook.value)()
            if refresh is not None:
                refresh()
        for callback in readers:
            getattr(callback, hook.value)(self.trainer, self.module)

    def _overriding(self, hook: Hook) -> list[Callback]:
        return [cb for cb in self.callbacks if overrides(cb, Callback, hook.value)]

    def _refusing_logs(self, hook: Hook, function: Callable[..., Any], name: str = "") -> Callable[..., Any]:
        """``function``, refusing ``self.log`` (naming ``name``, else the hook) where the hook may not log."""
        if hook.may_log:
            return function
        module = self.module

        def refusing_logs(*args: Any, **kwargs: Any) -> Any:
            return call_refusing_logs(module, name or hook.value, function, *args, **kwargs)

        return refusing_logs

    def _caller(self, hook: Hook, only: Owner | None = None) -> Callable[..., Any] | None:
        name, module, trainer = hook.value, self.module, self.trainer
        owners = hook.owners if only is None else hook.owners & only
        callback_fns = [self._refusing_logs(hook, getattr(cb, name), f"Callback.{name}")
                        for cb in self._overriding(hook)] if Owner.CALLBACK in owners else []
        module_fn = None
        if Owner.MODULE in owners and (Trait.DEFAULT_ACTS in hook.traits or overrides(module, Module, name)):
            module_fn = self._refusing_logs(hook, getattr(module, name))
        datamodule_fn = None
        if self.datamodule is not None and Owner.DATAMODULE in owners and self._datamodule_has(hook):
            datamodule_fn = self._refusing_logs(hook, getattr(self.datamodule, name))
        if Trait.BATCH_TRANSFER in hook.traits:
            return self._batch_hook(name, datamodule_fn, module_fn)
        if not callback_fns and datamodule_fn is None:
            return module_fn

        def call_all(*args: Any, **kwargs: Any) -> Any:
            if datamodule_fn is not None:
                datamodule_fn(*args, **kwargs)
            for fn in callback_fns:
                fn(trainer, module, *args, **kwargs)
            return module_fn(*args, **kwargs) if module_fn is not None else None

        return call_all

    def _batch_hook(self, name: str, datamodule_fn: Callable[..., Any] | None,
                    module_fn: Callable[..., Any] | None) -> Callable[..., Any] | None:
        """A DataModule's batch hook is used instead of the Module's, as in Lightning."""
        if datamodule_fn is None:
            return module_fn
        if defines(self.module, Module, name):
            warnings.warn(
                f"{name} is overridden in both the Module and the DataModule; the DataModule's is used.",
                stacklevel=2,
            )
        return datamodule_fn

    def _datamodule_has(self, hook: Hook) -> bool:
        # A batch hook is taken from the DataModule only when it defines its own, as Lightning decides (a wrapper
        # of the base method is not one); its other hooks run whenever they are set
        if Trait.BATCH_TRANSFER in hook.traits:
            return defines(self.datamodule, DataModule, hook.value)
        return overrides(self.datamodule, DataModule, hook.value)


def call_refusing_logs(module: Module, hook_name: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)``, during which ``self.log`` refuses to log, naming ``hook_name``."""
    state = module.__dict__  # set directly: nn.Module's __setattr__ costs a microsecond, and batch hooks are here
    earlier, state["_logging_refused_in"] = state.get("_logging_refused_in"), hook_name
    try:
        return function(*args, **kwargs)
    finally:
        state["_logging_refused_in"] = earlier


def merge_module_callbacks(callbacks: list[Callback], returned: Any) -> list[Callback]:
    """The run's callbacks: those ``configure_callbacks`` returned replace the Trainer's of the same type,
    and checkpoint-saving callbacks go last."""
    extra = [returned] if isinstance(returned, Callback) else list(returned or [])
    for callback in extra:
        if not isinstance(callback, Callback):
            raise MisconfigurationError(
                f"configure_callbacks returned {describe(callback)}; it must return Callback instances."
            )
    replaced = {type(cb) for cb in extra}
    kept = [cb for cb in callbacks if type(cb) not in replaced]
    merged = sorted(kept + extra, key=lambda cb: cb.runs_last)
    check_state_keys(merged)
    return merged


def lend_logging(callbacks: list[Callback], module: Module) -> None:
    """Give each callback the Module's ``log`` and ``log_dict``, so ``self.log(...)`` in a callback hook logs as
    the Module would there (as Lightning does at every run's start); a callback class with a ``log`` of its own
    keeps it."""
    for callback in callbacks:
        if not callable(getattr(type(callback), "log", None)):
            callback.log = module.log
        if not callable(getattr(type(callback), "log_dict", None)):
            callback.log_dict = module.log_dict


def check_state_keys(callbacks: list[Callback]) -> None:
    """Two callbacks with state must not share a state key (one would overwrite the other's in checkpoints)."""
    seen: set[str] = set()
    for callback in callbacks:
        if type(callback).state_dict is Callback.state_dict and "state_dict" not in vars(callback):
            continue
        if callback.state_key in seen:
            raise MisconfigurationError(
                f"Two {type(callback).__name__} callbacks share the state key {callback.state_key!r}, so one would "
                "overwrite the other's state in checkpoints. Give them different settings (e.g. another monitor) "
                "or keep one."
            )
        seen.add(callback.state_key)
