"""The training loop of ``Trainer.fit``: its set-up, epochs, batches, the optimizer step and when to validate.

The hook order is the one ``framework.hooks`` documents. Per batch the loop does only
what that batch needs: hooks nobody overrides were resolved to None before the first
batch, nothing is read back from the device, and logging I/O happens every
``log_every_n_steps`` optimizer steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from framework import console
from framework.errors import MisconfigurationError
from framework.hooks import Hook, overrides
from framework.module import Module
from framework.profilers.base import profiled_batches
from framework.seed import restore_rng_states, rng_states
from framework.trainer.auto_resume import (
    announce_resume,
    automatic_resume,
    consume_at_fit_end,
    note_preemption_checkpoints,
)
from framework.trainer.automatic import AutomaticOptimization
from framework.trainer.checkpoint_contents import (
    restore_for_fit,
    restore_optimizer_states,
    restore_training_state,
    rng_state_of_rank,
    save_checkpoint,
)
from framework.trainer.checkpoint_paths import load_for
from framework.trainer.data import (
    has_loader_source,
    load_train_data,
    load_val_data,
    no_training_data,
    numbered_batches,
    reload_due,
    set_sampler_epoch,
    val_is_defined,
)
from framework.trainer.manual import ManualOptimization, check_manual_settings
from framework.trainer.metrics import step_views
from framework.trainer.optimizers import configure_optimizers, step_schedulers
from framework.trainer.preemption import PreemptionStop
from framework.trainer.sampler import skip_in_sampler
from framework.trainer.state import RunningStage
from framework.trainer.step import StepHooks, outputs_for_hooks
from framework.trainer.stop_vote import StopVote
from framework.trainer.validation_in_fit import ValidationInFit
from framework.utilities.warnings import PossibleUserWarning

if TYPE_CHECKING:
    from framework.trainer.run import Run

_SHOULD_STOP = "`trainer.should_stop` was set."


class FitLoop:
    """Runs sanity checking, then training epochs with validation when due, for one ``fit`` call."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.context = run.context
        self.automatic = AutomaticOptimization(run)
        self.manual = ManualOptimization(run)
        self._resumed_rng: dict[str, Any] | None = None  # a checkpoint's random state, put back where it was taken
        self.validation = ValidationInFit(run, self._agreed)
        # The first epoch of a fit goes on where the state says (a checkpoint's, or an earlier fit's on this
        # trainer that was interrupted or cut short: its batch_idx and order_epoch); later ones start afresh.
        self._continuing = True
        self._stop_agreed = False  # should_stop is True because all ranks agreed (after a validation, a vote)
        self.preemption = PreemptionStop(run, lambda path: save_checkpoint(run, path))
        self.batch_stepped = False  # whether the batch being finished ended with an optimizer step
        self._resumed_epoch: dict[str, Any] = {}  # a checkpoint's epoch results and unfinished batch, if it has them

    # -- the whole fit ---
    def fit(self, ckpt_path: Any) -> None:
        """Check the settings, restore ``ckpt_path`` if given, configure the optimizers, then train."""
        run, module = self.run, self.run.module
        self._check_settings()
        run.state.validated = False
        self.context.validates_in_fit = val_is_defined(run)
        if not self.context.validates_in_fit and has_loader_source(run, "val") and run.is_global_zero and \
                not overrides(module, Module, "validation_step"):
            console.warn_user("You passed in a `val_dataloader` but have no `validation_step`. Skipping val loop.")
        # As in Lightning: weights, DataModule and callback states come back before configure_optimizers
        # (which may ask for the training loader), the optimizers' and the loops' state after it.
        resume = None
        if ckpt_path is None and run.settings.auto_resume:
            resume = run.runtime.broadcast(automatic_resume(run) if run.is_global_zero else None)
            ckpt_path = resume.path if resume is not None else None
        note_preemption_checkpoints(run)
        checkpoint = load_for(run, ckpt_path, run.weights_only) if ckpt_path is not None else None
        if checkpoint is not None:
            self._resumed_rng = restore_for_fit(run, checkpoint)
            self._resumed_epoch = checkpoint.get("loops", {}).get("fit", {})
            if resume is not None:
                announce_resume(run, resume, checkpoint)
        configure_optimizers(run, self.context, self.manual.optimizer_step)
        run.state.stage = RunningStage.TRAINING
        self.automatic.step_hooks = self.manual.step_hooks = StepHooks(run)
        if checkpoint is not None:
            restore_training_state(run, checkpoint)
        run.hooks.call(Hook.ON_FIT_START)
        if checkpoint is not None:
            restore_optimizer_states(run, checkpoint)
        module.zero_grad()  # as Lightning at a run's start: no earlier gradient holds memory
        if run.settings.max_epochs is None and run.epoch_limit != -1 and run.is_global_zero:
            console.warn_user(f"`max_epochs` was not set. Setting it to {run.epoch_limit} epochs. To train "
                              "without an epoch limit, set `max_epochs=-1`.", PossibleUserWarning)
        run.settle_epoch_limits()
        if not module.training:
            console.warn_user(
                f"{type(module).__qualname__} is in eval mode at the start of fit, so dropout and batch norm behave "
                "as in evaluation while training. Call model.train() first if that is not intended.",
            )
        self.preemption.watch.install()
        try:
            # restores the caller's setting on exit
            with torch.autograd.set_detect_anomaly(run.settings.detect_anomaly):
                self.train()
        finally:
            self.preemption.watch.restore()
        run.hooks.call(Hook.ON_FIT_END)
        consume_at_fit_end(run)

    def _check_settings(self) -> None:
        run, module = self.run, self.run.module
        if not module.automatic_optimization:
            check_manual_settings(run)
        if not overrides(module, Module, "training_step"):
            raise MisconfigurationError(f"{type(module).__qualname__} must define training_step to fit.")
        if not has_loader_source(run, "train"):
            raise no_training_data()

    def train(self) -> None:
        """Sanity check (at step 0 only), ``on_train_start``, epochs until a limit or a stop, then ``on_train_end``.

        When there is nothing to train (a limit already reached, ``limit_train_batches=0``) only
        the sanity check runs.
        """
        run = self.run
        if run.settings.sanity_steps and self.context.validates_in_fit and run.state.global_step == 0:
            self.validation.sanity_check()
        if run.settings.limit_train_batches == 0 and not run.settings.overfit_batches:
            self._announce_stop("No training batches.")
            return  # nothing to train: as in Lightning, no training loader and no on_train_start/end
        if (reason := self._stop_reason()) is not None:  # a resumed run that had already finished
            self._announce_stop(reason)
            return
        self._load_train_loader_if_due()
        if self.context.validates_in_fit and self.validation.due_in_epoch() and reload_due(run, "val"):
            load_val_data(run)  # before on_train_start, as in Lightning, so a progress bar knows its length
        run.train_results.reset()
        run.module._results = run.train_results  # on_train_start may log too
        run.hooks.call(Hook.ON_TRAIN_START)
        while (reason := self._stop_reason()) is None:
            if run.profiling is None:
                self._run_epoch()
            else:
                with run.profiling.profile("run_training_epoch"):
                    self._run_epoch()
        self._announce_stop(reason)
        run.hooks.call(Hook.ON_TRAIN_END)

    def _stop_reason(self) -> str | None:
        """Why training ends now, in Lightning's words; None while it goes on."""
        run, state = self.run, self.run.state
        if self.context.num_training_batches == 0:
            return "No training batches."
        if run.settings.max_steps != -1 and state.global_step >= run.settings.max_steps:
            return f"`max_steps={run.settings.max_steps!r}` reached."
        epochs = run.epoch_limit
        if epochs != -1 and state.current_epoch >= epochs:
            return f"`max_epochs={epochs!r}` reached."
        state.should_stop = self._stop_agreed = self._agreed(state.should_stop)
        if state.should_stop and self.can_stop_early():
            return _SHOULD_STOP
        return None

    def _announce_stop(self, reason: str) -> None:
        # a callback that set should_stop has said why itself (EarlyStopping, Timer)
        if reason != _SHOULD_STOP and self.run.is_global_zero:
            console.info(f"`Trainer.fit` stopped: {reason}")

    def can_stop_early(self) -> bool:
        """``should_stop`` is obeyed only once ``min_epochs`` and ``min_steps`` are met."""
        run, state = self.run, self.run.state
        met_epochs = run.settings.min_epochs is None or state.current_epoch >= run.settings.min_epochs
        met_steps = run.settings.min_steps is None or state.global_step >= run.settings.min_steps
        return met_epochs and met_steps

    def _agreed(self, decision: bool) -> bool:
        """True on every rank if any rank decided True (the ranks' clocks and callbacks may differ)."""
        if self.run.world_size == 1:
            return decision
        return self.run.runtime.reduce_boolean_decision(decision, all=False)

    # -- one epoch ---
    def _run_epoch(self) -> None:
        """One epoch: where it starts is settled once (a resumed run's batches, order and random state), then its
        batches run, each doing that batch's work only."""
        run = self.run
        self._load_train_loader_if_due()
        results = run.train_results
        run.module._results = results
        run.metrics.live = results
        run.state.stage = RunningStage.TRAINING
        start = self._start_epoch()
        if start is not None:
            self._run_batches(*start)

    def _start_epoch(self) -> tuple[int, bool] | None:
        """Settle where this epoch starts: its data order, the batches a resumed run trained already, the random
        state a checkpoint saved, ``on_train_epoch_start``. Returns the first batch and whether the batches before
        it must be fetched and dropped (else the sampler starts past them); None when a resumed epoch had run to
        its end already (it is ended here)."""
        run, state, loader = self.run, self.run.state, self.context.train_loader
        total = self.context.num_training_batches
        first = self._first_batch(total)  # > 0 only when resuming inside an epoch
        set_sampler_epoch(loader, state.order_epoch if state.order_epoch >= 0 else state.current_epoch)
        if first:
            self._finish_resumed_batch(first - 1, total)
        if first and first >= total:  # resumed from a checkpoint written after the epoch's last batch
            self._put_back_resumed_rng()
            self._end_epoch()
            return None
        if not first:
            self._put_back_resumed_rng()  # saved at an epoch's end: the next epoch starts from that state
        if not first or state.order_epoch >= 0:  # as in Lightning: not for an epoch resumed from inside it
            run.hooks.call(Hook.ON_TRAIN_EPOCH_START)
        fetch_skipped = bool(first) and not skip_in_sampler(loader, first)
        if first:
            self._put_back_resumed_rng()  # saved inside the epoch: the state its next batch started from
        return first, fetch_skipped

    def _run_batches(self, first: int, fetch_skipped: bool) -> None:
        """The epoch's batches from ``first`` on, then its end. Everything a batch does not need to decide again is
        resolved before the first one: the step, the hooks nobody overrides (None), the logging interval."""
        run, state, context, hooks = self.run, self.run.state, self.context, self.run.hooks
        total = context.num_training_batches
        if run.module.automatic_optimization:
            self.automatic.start_epoch()
            step = self.automatic.step
        else:
            step = self.manual.step
        transfer = run.move_batch
        batch_start = hooks.get(Hook.ON_TRAIN_BATCH_START)
        batch_end = hooks.get(Hook.ON_TRAIN_BATCH_END)
        log_every = run.settings.log_every_n_steps if run.loggers else 0
        max_steps = run.settings.max_steps
        validates = context.validates_in_fit and self.validation.due_in_epoch()
        vote = StopVote(run.runtime) if run.world_size > 1 else None
        # Only the Module's on_train_batch_start can skip the rest of the epoch (by returning -1), as in Lightning.
        agree_skip = vote is not None and overrides(run.module, Module, "on_train_batch_start")
        plateau_each_step = context.has_step_schedulers
        results = run.train_results
        signals = self.preemption.watch
        preempted = False

        batches = numbered_batches(context.train_loader, total, first, fetch_skipped)
        for batch_idx, batch, is_last in profiled_batches(run.profiling, "train_dataloader_next", batches):
            state.is_last_batch = is_last
            batch = transfer(batch, 0)
            results.start_batch(batch)
            if batch_start is not None:
                skip_rest = batch_start(batch, batch_idx) == -1
                if agree_skip:
                    skip_rest = self._agreed(skip_rest)
                if skip_rest:
                    break
            stepped_before = state.batches_stepped
            output, loss = step(batch, batch_idx, is_last)
            self.batch_stepped = state.batches_stepped != stepped_before
            state.batch_idx = batch_idx + 1
            state.total_batch_idx += 1
            if batch_end is not None:
                batch_end(outputs_for_hooks(output, loss), batch, batch_idx)
            results.in_batch = False
            if vote is not None:  # a stop asked for on any rank stops every rank after the same batch
                state.should_stop = vote.exchange(state.should_stop, already_agreed=self._stop_agreed,
                                                  preempt=signals.received is not None)
                self._stop_agreed = state.should_stop
            self._finish_batch(batch_idx, is_last, log_every, validates, plateau_each_step)
            if max_steps != -1 and state.global_step >= max_steps:
                break
            if state.should_stop and self.can_stop_early():
                break
            # Every rank at the same batch: the vote's agreement, or this process's own note when it is alone; and at
            # an optimizer step, since gradients accumulated for the next one are not in a checkpoint.
            if (vote.preempted if vote is not None else signals.received is not None) and self.batch_stepped:
                preempted = True
                break
        else:  # the loader ran out: the epoch is whole, also where its length was unknown
            self._end_epoch(ended_early=False, vote=vote)
            return
        if preempted:
            self.preemption.save_and_leave()
        self._end_epoch(ended_early=state.batch_idx < total, vote=vote)

    def _finish_batch(self, batch_idx: int, is_last: bool, log_every: int, validates: bool, plateau: bool) -> None:
        """What a batch does after ``on_train_batch_end`` (and the stop vote): log its step, validate when due, step
        the schedulers that follow each step. Also run for the batch a checkpoint saved in that hook was taken in."""
        run, state, stepped = self.run, self.run.state, self.batch_stepped
        # While should_stop waits for min_epochs/min_steps, every step is logged (as Lightning does).
        if log_every and stepped and (state.batches_stepped % log_every == 0 or state.should_stop):
            run.metrics.log_step(run.train_results, state.batches_stepped - 1, state.current_epoch)
        if validates and self.validation.due(batch_idx, is_last, state.should_stop and self.can_stop_early()):
            agreed = self.validation.validate(after_step=stepped)
            if agreed is not None:
                self._stop_agreed = agreed
        if plateau and stepped and self.automatic.applied:  # after validation: they see its metrics
            step_schedulers(run, "step", plateau=True)

    def _first_batch(self, total: float) -> int:
        """Where this epoch starts in its data: past the batches already trained when it continues one, else 0."""
        state = self.run.state
        if not self._continuing:
            state.batch_idx, state.order_epoch = 0, -1
        self._continuing = False
        if state.order_epoch >= 0 and state.batch_idx >= total:  # the epoch saved had run to its end after all
            state.batch_idx, state.order_epoch = 0, -1
        return state.batch_idx

    def _finish_resumed_batch(self, batch_idx: int, total: float) -> None:
        """Resuming inside an epoch: take back its logged values, and when the checkpoint was saved in
        ``on_train_batch_end``, finish that batch as the interrupted run did (its log row, its validation)."""
        saved, self._resumed_epoch = self._resumed_epoch, {}
        if "train_results" not in saved:
            return
        results = rng_state_of_rank(saved["train_results"], self.run.global_rank)  # each rank's own
        self.run.train_results.load_state_dict(results)
        if results["in_batch"]:
            if self._resumed_rng is not None:  # the state the interrupted run finished this batch with
                restore_rng_states(self._resumed_rng)
            self.batch_stepped = bool(saved.get("batch_stepped", True))
            log_every = self.run.settings.log_every_n_steps if self.run.loggers else 0
            validates = self.context.validates_in_fit and self.validation.due_in_epoch()
            plateau = self.context.has_step_schedulers
            self._finish_batch(batch_idx, batch_idx + 1 >= total, log_every, validates, plateau)
        self.run.train_results.in_batch = False

    def _load_train_loader_if_due(self) -> None:
        """Ask for the training loader when training starts, and again every ``reload_dataloaders_every_n_epochs``."""
        if reload_due(self.run, "train"):
            load_train_data(self.run)

    def training_rng_states(self) -> dict[str, Any]:
        """The random state training goes on from (during validation: the one it will be put back to)."""
        before = self.validation.rng_before
        return before if before is not None else rng_states()

    def _put_back_resumed_rng(self) -> None:
        if self._resumed_rng is not None:
            restore_rng_states(self._resumed_rng)
            self._resumed_rng = None

    def _end_epoch(self, ended_early: bool = False, vote: StopVote | None = None) -> None:
        """The epoch-end hooks and logs, then the counters move on to the next epoch.

        ``ended_early``: the epoch stopped before its last batch; ``batch_idx`` and
        ``order_epoch`` then keep where its data stopped, for the next fit (or one resumed from a
        checkpoint saved now) to train the rest of it first. ``vote``: the ranks' last stop
        agreement, still under way, which a wish from the last batch still counts in.
        """
        run, state = self.run, self.run.state
        if vote is not None and vote.finish():
            state.should_stop = True
        if vote is not None and vote.preempted:  # a wish sent at the last batch: saved before the epoch's end
            self.preemption.save_and_leave()
        # An epoch cut short is not finished: a checkpoint saved in its epoch-end hooks resumes inside it, under
        # its own number and without its start hooks, as in Lightning
        state.epoch_finished = not ended_early
        run.train_results.in_batch = False  # also when the epoch ended by a break mid-batch
        last_step = step_views(run.train_results)
        run.metrics.store(last_step)
        run.metrics.logged.update(last_step[0])
        run.metrics.end_epoch_of(run.train_results)
        run.hooks.call_epoch_end(Hook.ON_TRAIN_EPOCH_END, run.metrics.refresh_ending)
        run.metrics.end_epoch_of(None)
        run.metrics.log_epoch(run.train_results, state.epoch_row_step, state.current_epoch)
        run.metrics.live = None
        run.train_results.reset()
        if ended_early:
            state.order_epoch = state.order_epoch if state.order_epoch >= 0 else state.current_epoch
        else:
            state.batch_idx, state.order_epoch = 0, -1
        state.current_epoch += 1
        state.epoch_finished = False
        step_schedulers(run, "epoch", plateau=True)
