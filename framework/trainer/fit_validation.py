"""Validation inside ``fit``: the sanity check before training, and the validation passes due after a batch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from framework.hooks import Hook
from framework.seed import isolated_rng, restore_rng_states, rng_states
from framework.trainer.data import INFINITE, any_rank_has_batches, load_val_data, reload_due
from framework.trainer.eval_loop import run_evaluation
from framework.trainer.state import RunningStage

if TYPE_CHECKING:
    from framework.trainer.run_context import RunContext
    from framework.trainer.trainer import Trainer


class ValidationInFit:
    """The part of the fit loop (:class:`framework.trainer.fit_loop.FitLoop`) that validates; it uses the loop's
    ``_agreed`` and ``can_stop_early``."""

    trainer: Trainer
    context: RunContext
    _rng_before_validation: dict[str, Any] | None

    def _sanity_check(self) -> None:
        trainer = self.trainer
        trainer.state.stage = RunningStage.SANITY_CHECKING
        trainer.hooks.call(Hook.ON_SANITY_CHECK_START)
        if reload_due(trainer, "val"):
            load_val_data(trainer)
        if any_rank_has_batches(trainer, self.context.val_batch_counts):
            with isolated_rng():  # a seeded run trains the same with or without the sanity check
                run_evaluation(trainer, "validate", self.context.val_loaders, trainer.num_sanity_val_batches)
        trainer.hooks.call(Hook.ON_SANITY_CHECK_END)
        trainer.metrics.clear()
        trainer.state.stage = RunningStage.TRAINING

    def _validate(self, after_step: bool) -> None:
        """One validation pass inside fit; nothing when no loader has batches.

        ``after_step``: the last batch ended with an optimizer step, so no accumulated gradients
        are pending and ``on_validation_model_zero_grad`` may run (as in Lightning).
        """
        trainer = self.trainer
        if reload_due(trainer, "val"):
            load_val_data(trainer)
        if not any_rank_has_batches(trainer, self.context.val_batch_counts):
            return
        trainer.state.stage = RunningStage.VALIDATING
        if after_step:
            trainer.hooks.call(Hook.ON_VALIDATION_MODEL_ZERO_GRAD)
        trainer.state.validated = True  # from here on a missing monitored metric is an error, not "not yet"
        # Validation leaves the random state as it found it, so training goes on the same whether a resumed run
        # repeats a validation or not (and with or without validation, as with the sanity check).
        self._rng_before_validation = rng_states()
        try:
            run_evaluation(trainer, "validate", self.context.val_loaders, self.context.val_batch_counts)
        finally:
            restore_rng_states(self._rng_before_validation)
            self._rng_before_validation = None
        # A validation hook may have set should_stop on one rank: agreed now, so all stop after this batch.
        trainer.state.should_stop = self._stop_agreed = self._agreed(trainer.state.should_stop)
        trainer.state.stage = RunningStage.TRAINING
        trainer.module._results = trainer.train_results

    def _validates_in_epoch(self) -> bool:
        every_n = self.trainer.check_val_every_n_epoch
        return every_n is None or (self.trainer.state.current_epoch + 1) % every_n == 0

    def _should_validate(self, batch_idx: int, is_last: bool) -> bool:
        trainer, state = self.trainer, self.trainer.state
        if state.should_stop and self.can_stop_early():
            return True
        check_batch = self.context.val_check_batch
        if check_batch == INFINITE:
            return is_last
        position = state.total_batch_idx - 1 if trainer.check_val_every_n_epoch is None else batch_idx
        return (position + 1) % check_batch == 0
