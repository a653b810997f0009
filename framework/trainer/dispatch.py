"""Calls hooks on callbacks, the DataModule and the Module, in the order ``framework.hooks`` documents.

Which object overrides which hook is worked out once per run (``HookRunner``); on the
hot path a hook nobody overrides costs one ``is None`` test.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from framework.callbacks.base import Callback
from framework.datamodule import DataModule
from framework.errors import MisconfigurationError, describe
from framework.hooks import Hook, Target, defines, overrides
from framework.module import Module
from framework.profilers.base import profiled

if TYPE_CHECKING:
    from framework.trainer.trainer import Trainer

# Module hooks whose base implementation does work (zeroing gradients, eval/train mode, moving the batch),
# so they run even when the user did not override them.
_ACTING_DEFAULTS = frozenset({
    Hook.ON_VALIDATION_MODEL_ZERO_GRAD, Hook.ON_VALIDATION_MODEL_EVAL, Hook.ON_VALIDATION_MODEL_TRAIN,
    Hook.ON_TEST_MODEL_EVAL, Hook.ON_TEST_MODEL_TRAIN, Hook.ON_PREDICT_MODEL_EVAL, Hook.TRANSFER_BATCH_TO_DEVICE,
})
# Hooks a DataModule also has; its version runs before the Module's.
_DATAMODULE_HOOKS = frozenset({
    Hook.PREPARE_DATA, Hook.SETUP, Hook.TEARDOWN, Hook.ON_BEFORE_BATCH_TRANSFER,
    Hook.TRANSFER_BATCH_TO_DEVICE, Hook.ON_AFTER_BATCH_TRANSFER,
})
_BATCH_HOOKS = frozenset({Hook.ON_BEFORE_BATCH_TRANSFER, Hook.TRANSFER_BATCH_TO_DEVICE, Hook.ON_AFTER_BATCH_TRANSFER})


class HookRunner:
    """The overriding implementations of every hook, bound once.

    ``runner.get(Hook.ON_TRAIN_BATCH_END)`` is a function taking the hook's Module-side
    arguments, or None when neither a callback nor the Module overrides the hook.
    """

    def __init__(self, trainer: Trainer, module: Module, callbacks: list[Callback],
                 datamodule: DataModule | None) -> None:
        self.trainer = trainer
        self.module = module
        self.callbacks = callbacks
        self.datamodule = datamodule
        self._callers: dict[Hook, Callable[..., Any] | None] = {hook: self._build(hook) for hook in Hook}

    def get(self, hook: Hook) -> Callable[..., Any] | None:
        """The function that runs ``hook`` (given its Module-side arguments), or None when there is nothing to run."""
        return self._callers[hook]

    def all_default(self, *hooks: Hook) -> bool:
        """Whether nothing (Module, DataModule or callback) overrides any of ``hooks``."""
        owners = [(self.module, Module), (self.datamodule, DataModule), *((cb, Callback) for cb in self.callbacks)]
        return not any(obj is not None and overrides(obj, base, hook.value) for hook in hooks for obj, base in owners)

    def call(self, hook: Hook, *args: Any, **kwargs: Any) -> Any:
        """Run ``hook`` now; returns the Module's return value (None when it has none)."""
        caller = self._callers[hook]
        return caller(*args, **kwargs) if caller is not None else None

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
        if hook in _BATCH_HOOKS:
            return defines(self.datamodule, DataModule, hook.value)
        return overrides(self.datamodule, DataModule, hook.value)

    def _overriding(self, hook: Hook) -> list[Callback]:
        return [cb for cb in self.callbacks if overrides(cb, Callback, hook.value)]

    def _build(self, hook: Hook) -> Callable[..., Any] | None:
        caller = profiled(self.trainer._profiling, hook.value, self._caller(hook))
        if caller is None or hook not in NO_LOGGING:
            return caller
        module, name = self.module, hook.value

        def forbidding_logs(*args: Any, **kwargs: Any) -> Any:
            return call_refusing_logs(module, name, caller, *args, **kwargs)

        return forbidding_logs

    def _caller(self, hook: Hook) -> Callable[..., Any] | None:
        name = hook.value
        trainer, module = self.trainer, self.module
        callback_fns = [getattr(cb, name) for cb in self._overriding(hook)] if hook.target != Target.MODULE else []
        module_fn = None
        if hook.target != Target.CALLBACK and (hook in _ACTING_DEFAULTS or overrides(module, Module, name)):
            module_fn = getattr(module, name)
        datamodule_fn = None
        if self.datamodule is not None and hook in _DATAMODULE_HOOKS and self._datamodule_has(hook):
            datamodule_fn = getattr(self.datamodule, name)
        if hook in _BATCH_HOOKS:
            return self._batch_hook(name, datamodule_fn, module_fn)
        if not callback_fns and module_fn is None and datamodule_fn is None:
            return None
        if not callback_fns and datamodule_fn is None:
            return module_fn

        def run(*args: Any, **kwargs: Any) -> Any:
            if datamodule_fn is not None:
                datamodule_fn(*args, **kwargs)
            for fn in callback_fns:
                fn(trainer, module, *args, **kwargs)
            return module_fn(*args, **kwargs) if module_fn is not None else None

        return run



def call_refusing_logs(module: Module, hook_name: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)``, during which ``self.log`` refuses to log, naming ``hook_name``."""
    state = module.__dict__  # set directly: nn.Module's __setattr__ costs a microsecond, and batch hooks are here
    earlier, state["_logging_refused_in"] = state.get("_logging_refused_in"), hook_name
    try:
        return function(*args, **kwargs)
    finally:
        state["_logging_refused_in"] = earlier


# The hooks in which Lightning refuses self.log (its loops keep no results there), and so do we.
NO_LOGGING = frozenset({
    Hook.CONFIGURE_CALLBACKS, Hook.PREPARE_DATA, Hook.SETUP, Hook.CONFIGURE_MODEL, Hook.CONFIGURE_OPTIMIZERS,
    Hook.TEARDOWN, Hook.ON_FIT_START, Hook.ON_FIT_END, Hook.ON_SANITY_CHECK_START, Hook.ON_SANITY_CHECK_END,
    Hook.ON_TRAIN_END, Hook.ON_VALIDATION_END, Hook.ON_TEST_END, Hook.ON_BEFORE_BATCH_TRANSFER,
    Hook.TRANSFER_BATCH_TO_DEVICE, Hook.ON_AFTER_BATCH_TRANSFER, Hook.LR_SCHEDULER_STEP,
    Hook.ON_VALIDATION_MODEL_ZERO_GRAD, Hook.ON_VALIDATION_MODEL_EVAL, Hook.ON_VALIDATION_MODEL_TRAIN,
    Hook.ON_TEST_MODEL_EVAL, Hook.ON_TEST_MODEL_TRAIN, Hook.ON_PREDICT_MODEL_EVAL, Hook.ON_PREDICT_START,
    Hook.ON_PREDICT_END, Hook.ON_PREDICT_EPOCH_START, Hook.ON_PREDICT_EPOCH_END, Hook.ON_PREDICT_BATCH_START,
    Hook.ON_PREDICT_BATCH_END, Hook.ON_SAVE_CHECKPOINT, Hook.ON_LOAD_CHECKPOINT, Hook.ON_EXCEPTION,
})


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
