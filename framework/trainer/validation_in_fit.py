"""Validation inside ``fit``: the sanity check before training, and the validation passes due after a batch.

The fit loop holds one ``ValidationInFit`` and asks it, after each batch, whether validation is due and to run it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from framework.hooks import Hook
from framework.seed import isolated_rng, restore_rng_states, rng_states
from framework.trainer.data import INFINITE, any_rank_has_batches, load_val_data, reload_due
from framework.trainer.eval_loop import run_evaluation
from framework.trainer.state import RunningStage

if TYPE_CHECKING:
    from framework.trainer.run import Run


class ValidationInFit:
    """The validation of one ``fit``: ``agree(decision)`` makes a rank's stop wish every rank's (the fit loop's)."""

    def __init__(self, run: Run, agree: Callable[[bool], bool]) -> None:
        self.run = run
        self.agree = agree
        #: During a validation pass: the random state training goes on from once it ends.
        self.rng_before: dict[str, Any] | None = None

    def sanity_check(self) -> None:
        """The short validation before the first step (``num_sanity_val_steps`` batches per loader)."""
        run, context = self.run, self.run.context
        run.state.stage = RunningStage.SANITY_CHECKING
        run.hooks.call(Hook.ON_SANITY_CHECK_START)
        if reload_due(run, "val"):
            load_val_data(run)
        if any_rank_has_batches(run, context.val_batch_counts):
            with isolated_rng():  # a seeded run trains the same with or without the sanity check
                run_evaluation(run, "validate", context.val_loaders, run.num_sanity_val_batches)
        run.hooks.call(Hook.ON_SANITY_CHECK_END)
        run.metrics.clear()
        run.state.stage = RunningStage.TRAINING

    def validate(self, after_step: bool) -> bool | None:
        """One validation pass inside fit; returns whether every rank now agrees that ``should_stop`` is set, or
        None when no loader had batches (nothing ran).

        ``after_step``: the last batch ended with an optimizer step, so no accumulated gradients
        are pending and ``on_validation_model_zero_grad`` may run (as in Lightning).
        """
        run, context = self.run, self.run.context
        if reload_due(run, "val"):
            load_val_data(run)
        if not any_rank_has_batches(run, context.val_batch_counts):
            return None
        run.state.stage = RunningStage.VALIDATING
        if after_step:
            run.hooks.call(Hook.ON_VALIDATION_MODEL_ZERO_GRAD)
        run.state.validated = True  # from here on a missing monitored metric is an error, not "not yet"
        # Validation leaves the random state as it found it, so training goes on the same whether a resumed run
        # repeats a validation or not (and with or without validation, as with the sanity check).
        self.rng_before = rng_states()
        try:
            run_evaluation(run, "validate", context.val_loaders, context.val_batch_counts)
        finally:
            restore_rng_states(self.rng_before)
            self.rng_before = None
        # A validation hook may have set should_stop on one rank: agreed now, so all stop after this batch.
        run.state.should_stop = self.agree(run.state.should_stop)
        run.state.stage = RunningStage.TRAINING
        run.module._results = run.train_results
        return run.state.should_stop

    def due_in_epoch(self) -> bool:
        """Whether this epoch validates at all (``check_val_every_n_epoch``)."""
        every_n = self.run.settings.check_val_every_n_epoch
        return every_n is None or (self.run.state.current_epoch + 1) % every_n == 0

    def due(self, batch_idx: int, is_last: bool, stopping: bool) -> bool:
        """Whether validation runs after batch ``batch_idx``; ``stopping``: training stops after this batch."""
        run, state = self.run, self.run.state
        if stopping:
            return True
        check_batch = run.context.val_check_batch
        if check_batch == INFINITE:
            return is_last
        position = state.total_batch_idx - 1 if run.settings.check_val_every_n_epoch is None else batch_idx
        return (position + 1) % check_batch == 0
