"""Every hook the loops call, named once, with the loops as pseudocode.

``Trainer.fit`` runs, for each hook, the callbacks first (in the order given, checkpoint
callbacks last) and then the ``Module`` (a ``DataModule`` hook, where there is one, before
the ``Module``'s); ``on_load_checkpoint`` is the exception, Module first (before the weights are loaded) and the
callbacks after, as in Lightning::

    configure_callbacks                       # Module only; every run (fit, validate, test, predict)
    prepare_data                              # DataModule, then Module; once per node
    setup("fit")                              # DataModule, callbacks, Module
    configure_model                           # Module only
    <ckpt_path: on_load_checkpoint (Module); weights; DataModule state; on_load_checkpoint (callbacks);
     callback states>
    configure_optimizers                      # Module only
    <ckpt_path: optimizer, scheduler, precision and loop state>
    on_fit_start
    on_sanity_check_start                     # callbacks only
        val_dataloader                        # validation loaders are asked for here (or when first needed)
        <validation loop over num_sanity_val_steps batches>
    on_sanity_check_end                       # callbacks only
    train_dataloader                          # asked for here, unless estimated_stepping_batches was read before
    on_train_start
    for epoch:
        on_train_epoch_start
        for batch_idx, batch in train batches:
            on_before_batch_transfer          # the DataModule's if it has one, else the Module's;
            transfer_batch_to_device          #   each returns the batch
            on_after_batch_transfer
            on_train_batch_start              # returning -1 ends the epoch here
            optimizer_step                    # Module only, when overridden: it gets the closure below
              training_step                   #   (the closure: training_step ... clipping)
              on_before_zero_grad             #   on the first batch of each accumulation window
              optimizer_zero_grad             #   Module only; optimizer.zero_grad()
              on_before_backward
              backward                        #   Module only
              on_after_backward
              on_before_optimizer_step        #   once per optimizer step, not per micro-batch
              configure_gradient_clipping     #   Module only; clips when gradient_clip_val is set
            lr_scheduler_step                 # Module only; "step" schedulers when due, "epoch" ones
                                              # after the epoch's last batch
            on_train_batch_end
            <validation loop when due>
        on_train_epoch_end
    on_train_end
    on_fit_end
    teardown("fit")                           # DataModule, callbacks, Module

The validation loop (also ``Trainer.validate``; ``test`` and ``predict`` have the same
shape with their own names)::

    on_validation_model_zero_grad             # Module only; inside fit after an optimizer step (not in
                                              # an accumulation window, not in the sanity check)
    on_validation_model_eval                  # Module only
    on_validation_start
    on_validation_epoch_start
    for dataloader_idx, batch_idx, batch in validation batches:
        <batch transfer hooks>
        on_validation_batch_start
        validation_step
        on_validation_batch_end
    on_validation_epoch_end
    on_validation_end
    on_validation_model_train                 # Module only

Any exception: ``on_exception`` (callbacks, then Module), then it propagates; ``KeyboardInterrupt`` too, after a
warning (the run's status is ``interrupted``).
"""

from __future__ import annotations

import functools
from enum import Enum, Flag, auto


class Owner(Flag):
    """Who may define a hook: the Module, callbacks, a DataModule (any combination)."""

    MODULE = auto()
    CALLBACK = auto()
    DATAMODULE = auto()


class Trait(Flag):
    """How the loops call a hook, beyond who defines it."""

    NONE = 0
    #: ``self.log`` refuses to log in it, as in Lightning (its loops keep no results there).
    NO_LOGGING = auto()
    #: The Module's own implementation does work (eval mode, zeroing gradients, moving the batch), so it runs
    #: where nothing overrides it.
    DEFAULT_ACTS = auto()
    #: A batch-transfer hook: a DataModule's own replaces the Module's instead of running before it.
    BATCH_TRANSFER = auto()


_M, _C, _D = Owner.MODULE, Owner.CALLBACK, Owner.DATAMODULE
_NO_LOG, _ACTS, _BATCH = Trait.NO_LOGGING, Trait.DEFAULT_ACTS, Trait.BATCH_TRANSFER


class Hook(str, Enum):
    """One member per hook; the value is the method name on ``Callback``, ``Module`` and ``DataModule``.

    Each member also says who may define it (``owners``) and how the loops call it (``traits``): this table is
    all the hook runner reads (``framework.trainer.hook_runner``).
    """

    owners: Owner
    traits: Trait

    def __new__(cls, name: str, owners: Owner = _M | _C, traits: Trait = Trait.NONE) -> Hook:
        member = str.__new__(cls, name)
        member._value_ = name
        member.owners = owners
        member.traits = traits
        return member

    @property
    def for_callbacks(self) -> bool:
        """Callbacks may define it (as ``hook(trainer, pl_module, ...)``)."""
        return Owner.CALLBACK in self.owners

    @property
    def for_module(self) -> bool:
        """The Module may define it."""
        return Owner.MODULE in self.owners

    @property
    def for_datamodule(self) -> bool:
        """A DataModule may define it; its implementation runs before the Module's (or instead, for batch hooks)."""
        return Owner.DATAMODULE in self.owners

    @property
    def may_log(self) -> bool:
        """``self.log`` works inside it."""
        return Trait.NO_LOGGING not in self.traits

    CONFIGURE_CALLBACKS = "configure_callbacks", _M, _NO_LOG
    PREPARE_DATA = "prepare_data", _M | _D, _NO_LOG
    SETUP = "setup", _M | _C | _D, _NO_LOG
    CONFIGURE_MODEL = "configure_model", _M, _NO_LOG
    CONFIGURE_OPTIMIZERS = "configure_optimizers", _M, _NO_LOG
    TEARDOWN = "teardown", _M | _C | _D, _NO_LOG

    ON_FIT_START = "on_fit_start", _M | _C, _NO_LOG
    ON_FIT_END = "on_fit_end", _M | _C, _NO_LOG
    ON_SANITY_CHECK_START = "on_sanity_check_start", _C, _NO_LOG
    ON_SANITY_CHECK_END = "on_sanity_check_end", _C, _NO_LOG

    ON_TRAIN_START = "on_train_start"
    ON_TRAIN_END = "on_train_end", _M | _C, _NO_LOG
    ON_TRAIN_EPOCH_START = "on_train_epoch_start"
    ON_TRAIN_EPOCH_END = "on_train_epoch_end"
    ON_TRAIN_BATCH_START = "on_train_batch_start"
    ON_TRAIN_BATCH_END = "on_train_batch_end"

    ON_BEFORE_BATCH_TRANSFER = "on_before_batch_transfer", _M | _D, _NO_LOG | _BATCH
    TRANSFER_BATCH_TO_DEVICE = "transfer_batch_to_device", _M | _D, _NO_LOG | _BATCH | _ACTS
    ON_AFTER_BATCH_TRANSFER = "on_after_batch_transfer", _M | _D, _NO_LOG | _BATCH

    ON_BEFORE_BACKWARD = "on_before_backward"
    BACKWARD = "backward", _M
    ON_AFTER_BACKWARD = "on_after_backward"
    ON_BEFORE_OPTIMIZER_STEP = "on_before_optimizer_step"
    CONFIGURE_GRADIENT_CLIPPING = "configure_gradient_clipping", _M
    OPTIMIZER_STEP = "optimizer_step", _M
    ON_BEFORE_ZERO_GRAD = "on_before_zero_grad"
    OPTIMIZER_ZERO_GRAD = "optimizer_zero_grad", _M
    LR_SCHEDULER_STEP = "lr_scheduler_step", _M, _NO_LOG

    ON_VALIDATION_MODEL_ZERO_GRAD = "on_validation_model_zero_grad", _M, _NO_LOG | _ACTS
    ON_VALIDATION_MODEL_EVAL = "on_validation_model_eval", _M, _NO_LOG | _ACTS
    ON_VALIDATION_MODEL_TRAIN = "on_validation_model_train", _M, _NO_LOG | _ACTS
    ON_VALIDATION_START = "on_validation_start"
    ON_VALIDATION_END = "on_validation_end", _M | _C, _NO_LOG
    ON_VALIDATION_EPOCH_START = "on_validation_epoch_start"
    ON_VALIDATION_EPOCH_END = "on_validation_epoch_end"
    ON_VALIDATION_BATCH_START = "on_validation_batch_start"
    ON_VALIDATION_BATCH_END = "on_validation_batch_end"

    ON_TEST_MODEL_EVAL = "on_test_model_eval", _M, _NO_LOG | _ACTS
    ON_TEST_MODEL_TRAIN = "on_test_model_train", _M, _NO_LOG | _ACTS
    ON_TEST_START = "on_test_start"
    ON_TEST_END = "on_test_end", _M | _C, _NO_LOG
    ON_TEST_EPOCH_START = "on_test_epoch_start"
    ON_TEST_EPOCH_END = "on_test_epoch_end"
    ON_TEST_BATCH_START = "on_test_batch_start"
    ON_TEST_BATCH_END = "on_test_batch_end"

    ON_PREDICT_MODEL_EVAL = "on_predict_model_eval", _M, _NO_LOG | _ACTS
    ON_PREDICT_START = "on_predict_start", _M | _C, _NO_LOG
    ON_PREDICT_END = "on_predict_end", _M | _C, _NO_LOG
    ON_PREDICT_EPOCH_START = "on_predict_epoch_start", _M | _C, _NO_LOG
    ON_PREDICT_EPOCH_END = "on_predict_epoch_end", _M | _C, _NO_LOG
    ON_PREDICT_BATCH_START = "on_predict_batch_start", _M | _C, _NO_LOG
    ON_PREDICT_BATCH_END = "on_predict_batch_end", _M | _C, _NO_LOG

    ON_SAVE_CHECKPOINT = "on_save_checkpoint", _M | _C, _NO_LOG
    ON_LOAD_CHECKPOINT = "on_load_checkpoint", _M | _C, _NO_LOG
    ON_EXCEPTION = "on_exception", _M | _C, _NO_LOG


def defines(obj: object, base: type, name: str) -> bool:
    """Whether ``obj`` has its own ``name``, not ``base``'s: like ``overrides``, but an instance attribute that
    only wraps ``base``'s method (``functools.wraps``, ``partial``, ``Mock(wraps=...)``) does not count, as in
    Lightning's choice between a DataModule's batch hooks and the Module's."""
    found = getattr(obj, name, None)
    for _ in range(8):  # a few layers of wrapping at most
        if hasattr(found, "__wrapped__"):  # what functools.wraps (or update_wrapper on a partial) wrapped
            found = found.__wrapped__
        elif type(found).__module__ == "unittest.mock":
            found = found._mock_wraps
        elif isinstance(found, functools.partial):
            found = found.func
        else:
            break
    if found is None:
        return False
    return getattr(found, "__func__", found) is not getattr(base, name, None)


def overrides(obj: object, base: type, name: str) -> bool:
    """Whether ``obj``'s class defines ``name`` differently from ``base``. An instance attribute counts, and one
    set to None (``model.validation_step = None``) means not defined, as in Lightning."""
    own = getattr(obj, "__dict__", {})
    if name in own:
        return own[name] is not None
    return getattr(type(obj), name, None) is not getattr(base, name, None)
