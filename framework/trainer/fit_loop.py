"""The training loop of ``Trainer.fit``: epochs, batches, the optimizer step and when to validate.

The hook order is the one ``framework.hooks`` documents. Per batch the loop does only
what that batch needs: hooks nobody overrides were resolved to None before the first
batch, nothing is read back from the device, and logging I/O happens every
``log_every_n_steps`` optimizer steps.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from framework.errors import MisconfigurationError, describe
from framework.hooks import Hook, overrides
from framework.module import Module
from framework.precision import Precision
from framework.seed import isolated_rng
from framework.strategies import Strategy
from framework.trainer.data import INFINITE, limited, load_val_data, reload_due, set_sampler_epoch
from framework.trainer.eval_loop import run_evaluation
from framework.trainer.metrics import step_views
from framework.trainer.optimizers import OptimizerProxy, step_schedulers
from framework.trainer.state import RunningStage


class FitLoop:
    """Runs sanity checking, then training epochs with validation when due, for one ``fit`` call."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.started_at = 0.0
        self._closure: _StepClosure | None = None  # automatic optimization's, made per epoch

    # -- the whole fit ---
    def run(self) -> None:
        """Sanity check (at step 0 only), ``on_train_start``, epochs until a limit or a stop, then ``on_train_end``.

        When there is nothing to train (a limit already reached, ``limit_train_batches=0``) only
        the sanity check runs.
        """
        trainer = self.trainer
        self.started_at = time.monotonic()
        if trainer.sanity_steps and trainer.validates_in_fit and trainer.state.global_step == 0:
            self._sanity_check()
        if self._done() or (trainer.limit_train_batches == 0 and not trainer.overfit_batches):
            return  # nothing to train: as in Lightning, no training loader and no on_train_start/end
        trainer.load_train_loader_if_due()
        if trainer.validates_in_fit and self._validates_in_epoch() and reload_due(trainer, "val"):
            load_val_data(trainer)  # before on_train_start, as in Lightning, so a progress bar knows its length
        trainer.train_results.reset()
        trainer.module._results = trainer.train_results  # on_train_start may log too
        trainer.hooks.call(Hook.ON_TRAIN_START)
        while not self._done():
            self._run_epoch()
        trainer.hooks.call(Hook.ON_TRAIN_END)

    def _done(self) -> bool:
        trainer, state = self.trainer, self.trainer.state
        if trainer.max_steps != -1 and state.global_step >= trainer.max_steps:
            return True
        if trainer.max_epochs != -1 and state.current_epoch >= trainer.max_epochs:
            return True
        if trainer.num_training_batches == 0:
            return True
        if self._time_is_up():
            return True
        return state.should_stop and self.can_stop_early()

    def can_stop_early(self) -> bool:
        """``should_stop`` is obeyed only once ``min_epochs`` and ``min_steps`` are met."""
        trainer, state = self.trainer, self.trainer.state
        met_epochs = trainer.min_epochs is None or state.current_epoch >= trainer.min_epochs
        met_steps = trainer.min_steps is None or state.global_step >= trainer.min_steps
        return met_epochs and met_steps

    def _time_is_up(self) -> bool:
        max_time = self.trainer.max_time
        if max_time is not None and time.monotonic() - self.started_at >= max_time.total_seconds():
            self.trainer.state.should_stop = True
            return True
        return False

    def _sanity_check(self) -> None:
        trainer = self.trainer
        trainer.state.stage = RunningStage.SANITY_CHECKING
        trainer.hooks.call(Hook.ON_SANITY_CHECK_START)
        if reload_due(trainer, "val"):
            load_val_data(trainer)
        if any(trainer.val_batch_counts):
            with isolated_rng():  # a seeded run trains the same with or without the sanity check
                run_evaluation(trainer, "validate", trainer.val_loaders, trainer.num_sanity_val_batches)
        trainer.hooks.call(Hook.ON_SANITY_CHECK_END)
        trainer.metrics.clear()
        trainer.state.stage = RunningStage.TRAINING

    # -- one epoch ---
    def _run_epoch(self) -> None:
        trainer, state, hooks = self.trainer, self.trainer.state, self.trainer.hooks
        trainer.load_train_loader_if_due()
        loader = trainer.train_loader
        set_sampler_epoch(loader, state.current_epoch)
        results = trainer.train_results
        trainer.module._results = results
        trainer.metrics.live = results
        state.stage = RunningStage.TRAINING
        total = trainer.num_training_batches
        first = state.batch_idx  # > 0 only when resuming inside an epoch
        if first and first >= total:  # resumed from a checkpoint written after the epoch's last batch
            self._end_epoch()
            return
        hooks.call(Hook.ON_TRAIN_EPOCH_START)
        # Gradients are zeroed after each step; this clears what an unfinished accumulation window
        # (an epoch ended early) or the caller left behind, so it cannot leak into the next step.
        for optimizer in trainer.optimizers:
            optimizer.zero_grad(set_to_none=True)

        if trainer.module.automatic_optimization:
            step, self._closure = self._automatic_step, _StepClosure(self, trainer.optimizers[0])
        else:
            step = self._manual_step
        transfer = trainer.batch_mover()
        batch_start = hooks.get(Hook.ON_TRAIN_BATCH_START)
        batch_end = hooks.get(Hook.ON_TRAIN_BATCH_END)
        log_every = trainer.log_every_n_steps if trainer.loggers else 0
        max_steps = trainer.max_steps
        watch_time = trainer.max_time is not None
        validates = trainer.validates_in_fit and self._validates_in_epoch()
        plateau_each_step = trainer.has_step_schedulers

        for batch_idx, batch, is_last in _numbered(loader, total, first):
            state.is_last_batch = is_last
            batch = transfer(batch, 0)
            results.start_batch(batch)
            if batch_start is not None and batch_start(batch, batch_idx) == -1:
                break
            stepped_before = state.batches_stepped
            output, loss = step(batch, batch_idx, is_last)
            state.batch_idx = batch_idx + 1
            state.total_batch_idx += 1
            if batch_end is not None:
                batch_end(_outputs_for_hooks(output, loss), batch, batch_idx)
            results.in_batch = False
            stepped = state.batches_stepped != stepped_before
            # While should_stop waits for min_epochs/min_steps, every step is logged (as Lightning does).
            if log_every and stepped and (state.batches_stepped % log_every == 0 or state.should_stop):
                trainer.metrics.log_step(results, state.batches_stepped - 1, state.current_epoch)
            if validates and self._should_validate(batch_idx, is_last):
                trainer.run_validation_in_fit(after_step=stepped)
            if plateau_each_step and stepped:  # after validation, so they see its metrics
                step_schedulers(trainer, "step", plateau=True)
            if max_steps != -1 and state.global_step >= max_steps:
                break
            if watch_time and self._time_is_up():
                break
            if state.should_stop and self.can_stop_early():
                break
        self._end_epoch()

    def _end_epoch(self) -> None:
        trainer, state = self.trainer, self.trainer.state
        state.epoch_finished = True
        trainer.train_results.in_batch = False  # also when the epoch ended by a break mid-batch
        last_step = step_views(trainer.train_results)
        trainer.metrics.store(last_step)
        trainer.metrics.logged.update(last_step[0])
        trainer.metrics.ending = trainer.train_results
        trainer.hooks.call_epoch_end(Hook.ON_TRAIN_EPOCH_END)
        trainer.metrics.ending = None
        trainer.metrics.log_epoch(trainer.train_results, max(state.batches_stepped - 1, 0), state.current_epoch)
        trainer.metrics.live = None
        trainer.train_results.reset()
        state.current_epoch += 1
        state.batch_idx = 0
        state.epoch_finished = False
        step_schedulers(trainer, "epoch", plateau=True)

    def _validates_in_epoch(self) -> bool:
        every_n = self.trainer.check_val_every_n_epoch
        return every_n is None or (self.trainer.state.current_epoch + 1) % every_n == 0

    def _should_validate(self, batch_idx: int, is_last: bool) -> bool:
        trainer, state = self.trainer, self.trainer.state
        if state.should_stop and self.can_stop_early():
            return True
        check_batch = trainer.val_check_batch
        if check_batch == INFINITE:
            return is_last
        position = state.total_batch_idx - 1 if trainer.check_val_every_n_epoch is None else batch_idx
        return (position + 1) % check_batch == 0

    # -- one batch ---
    def _automatic_step(self, batch: Any, batch_idx: int, is_last: bool) -> tuple[Any, torch.Tensor | None]:
        trainer, state = self.trainer, self.trainer.state
        accumulate = trainer.accumulate_grad_batches
        stepping = is_last or (batch_idx + 1) % accumulate == 0
        closure = self._closure
        closure.prepare(batch, batch_idx, stepping)
        optimizer = closure.optimizer
        if not stepping:
            with trainer.runtime.no_backward_sync(trainer.model):
                closure()
            return closure.output, closure.loss
        hooks = trainer.step_hooks
        if hooks.optimizer_step is None:
            stepped = hooks.runtime_optimizer_step(optimizer, closure)
        else:
            stepped = self._user_optimizer_step(optimizer, closure, batch_idx)
        if hooks.before_zero_grad is not None:
            hooks.before_zero_grad(optimizer)
        if hooks.zero_grad is not None:
            hooks.zero_grad(state.current_epoch, batch_idx, optimizer)
        else:
            optimizer.zero_grad(set_to_none=True)
        # A step skipped for inf/nan gradients (fp16) still counts, as in Lightning; only the
        # schedulers wait for a step that really changed the weights.
        state.global_step += 1
        if stepped and trainer.has_step_schedulers:
            step_schedulers(trainer, "step", plateau=False)
        if is_last:
            step_schedulers(trainer, "epoch", plateau=False)
        state.batches_stepped += 1
        return closure.output, closure.loss

    def _user_optimizer_step(self, optimizer: torch.optim.Optimizer, closure: _StepClosure, batch_idx: int) -> bool:
        """The Module's ``optimizer_step`` override, given an optimizer whose ``step`` goes through the runtime."""
        trainer = self.trainer
        user_step, runtime_step = trainer.step_hooks.optimizer_step, trainer.step_hooks.runtime_optimizer_step
        outcome: list[bool] = []

        def step_through(opt: torch.optim.Optimizer, step_closure: Any = None, **kwargs: Any) -> Any:
            outcome.append(runtime_step(opt, step_closure, **kwargs))

        user_step(trainer.state.current_epoch, batch_idx, OptimizerProxy(optimizer, step_through), closure)
        if not closure.ran:
            raise MisconfigurationError(
                "Your optimizer_step override did not call optimizer.step(closure=optimizer_closure); the closure "
                "runs training_step and backward, so without it nothing is trained."
            )
        return all(outcome) and bool(outcome)

    def _manual_step(self, batch: Any, batch_idx: int, is_last: bool) -> tuple[Any, torch.Tensor | None]:
        trainer = self.trainer
        with trainer.runtime.autocast():
            output = trainer.training_step(batch, batch_idx)
        loss = check_training_output(output, manual=True)
        trainer.state.batches_stepped += 1
        return output, loss

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``self.manual_backward(loss)``: the backward hooks around the strategy's backward."""
        hooks = self.trainer.step_hooks
        if hooks.before_backward is not None:
            hooks.before_backward(loss)
        hooks.backward(loss, *args, **kwargs)
        if hooks.after_backward is not None:
            hooks.after_backward()

    def manual_optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Any = None, **kwargs: Any) -> bool:
        """``opt.step()`` inside a manual ``training_step``: hooks, precision, then count the step."""
        hooks = self.trainer.step_hooks
        if hooks.before_optimizer_step is not None:
            if closure is None and hooks.unscale is not None:  # with a closure, backward has not run yet
                hooks.unscale(optimizer)
            hooks.before_optimizer_step(optimizer)
        stepped = hooks.runtime_optimizer_step(optimizer, closure, **kwargs)
        self.trainer.state.global_step += 1
        return stepped


class _StepClosure:
    """training_step, backward and the pre-step hooks of one batch, as the callable ``optimizer.step`` takes.

    One instance serves a whole epoch (``prepare`` points it at the next batch), so a step allocates no closure.
    """

    __slots__ = ("loop", "batch", "batch_idx", "optimizer", "stepping", "output", "loss", "ran")

    def __init__(self, loop: FitLoop, optimizer: Any) -> None:
        self.loop = loop
        self.optimizer = optimizer
        self.prepare(None, 0, False)

    def prepare(self, batch: Any, batch_idx: int, stepping: bool) -> None:
        """Make the next call run ``training_step`` on ``batch``; ``stepping``: the optimizer steps after it."""
        self.batch = batch
        self.batch_idx = batch_idx
        self.stepping = stepping
        self.output = None  # what training_step returned
        self.loss = None  # the loss backward saw
        self.ran = False

    def __call__(self) -> torch.Tensor | None:
        trainer = self.loop.trainer
        hooks = trainer.step_hooks
        if self.ran:
            # Optimizers such as LBFGS evaluate the closure several times per step; gradients are
            # otherwise zeroed only after the step, so clear the previous evaluation's here.
            self.optimizer.zero_grad(set_to_none=True)
        self.ran = True
        with trainer.runtime.autocast():
            output = trainer.training_step(self.batch, self.batch_idx)
        loss = check_training_output(output, manual=False)
        if loss is not None and trainer.accumulate_grad_batches > 1:
            loss = loss / trainer.accumulate_grad_batches
        self.output, self.loss = output, loss
        if loss is None:
            return None
        if hooks.before_backward is not None:
            hooks.before_backward(loss)
        hooks.backward(loss)
        if hooks.after_backward is not None:
            hooks.after_backward()
        if self.stepping:
            if hooks.unscale is not None:
                hooks.unscale(self.optimizer)
            if hooks.before_optimizer_step is not None:
                hooks.before_optimizer_step(self.optimizer)
            if hooks.clip is not None:
                hooks.clip(self.optimizer, trainer.gradient_clip_val, trainer.gradient_clip_algorithm)
        return loss


def _outputs_for_hooks(output: Any, loss: torch.Tensor | None) -> dict[str, Any]:
    """What ``on_train_batch_end`` receives, as in Lightning: ``{"loss": detached loss, **other keys}``.

    The loss is the one backward saw (divided by ``accumulate_grad_batches``); ``{}`` for None.
    """
    outputs = dict(output) if isinstance(output, dict) else {}
    if loss is not None:
        outputs["loss"] = loss.detach()
    return outputs


def check_training_output(output: Any, manual: bool) -> torch.Tensor | None:
    """The loss in what ``training_step`` returned; a clear error for anything not accepted."""
    if isinstance(output, torch.Tensor):
        return _scalar_loss(output, manual)
    if output is None:
        return None
    if isinstance(output, dict):
        loss = output.get("loss")
        if isinstance(loss, torch.Tensor):
            return _scalar_loss(loss, manual)
        if manual and "loss" not in output:
            return None
        raise MisconfigurationError(
            f"training_step returned a dict whose 'loss' is {describe(loss)}; "
            "it must hold the loss tensor under 'loss'."
        )
    if manual:
        raise MisconfigurationError(
            f"training_step returned {describe(output)}; in manual optimization it may return a tensor, a dict "
            "or None."
        )
    raise MisconfigurationError(
        f"training_step returned {describe(output)}; accepted: the loss tensor, a dict with a 'loss' tensor, or None "
        "to skip the batch."
    )


def _scalar_loss(loss: torch.Tensor, manual: bool) -> torch.Tensor:
    if not manual and loss.numel() != 1:
        raise MisconfigurationError(
            f"training_step returned a loss of shape {tuple(loss.shape)}; the loss must be a single number "
            "(reduce it, e.g. loss.mean())."
        )
    return loss


def _numbered(loader: Iterable, total: float, skip: int) -> Iterator[tuple[int, Any, bool]]:
    """``(batch_idx, batch, is_last)`` for the first ``total`` batches, after skipping ``skip`` of them."""
    batches: Iterator[Any] = limited(loader, total)
    if skip:
        batches = itertools.islice(batches, skip, None)
    if total != INFINITE:
        last = int(total) - 1
        for batch_idx, batch in enumerate(batches, start=skip):
            yield batch_idx, batch, batch_idx == last
        return
    # No length: look one batch ahead to know which is last.
    batch_idx = skip
    try:
        current = next(batches)
    except StopIteration:
        return
    for upcoming in batches:
        yield batch_idx, current, False
        current = upcoming
        batch_idx += 1
    yield batch_idx, current, True


class StepHooks:
    """The hooks of the optimizer step, resolved once per fit (None where nothing overrides them)."""

    def __init__(self, trainer: Any) -> None:
        hooks, module, runtime = trainer.hooks, trainer.module, trainer.runtime
        self.before_backward = hooks.get(Hook.ON_BEFORE_BACKWARD)
        self.after_backward = hooks.get(Hook.ON_AFTER_BACKWARD)
        self.before_optimizer_step = hooks.get(Hook.ON_BEFORE_OPTIMIZER_STEP)
        self.before_zero_grad = hooks.get(Hook.ON_BEFORE_ZERO_GRAD)
        self.clip = hooks.get(Hook.CONFIGURE_GRADIENT_CLIPPING)
        if self.clip is None and trainer.gradient_clip_val:
            self.clip = module.configure_gradient_clipping
        self.optimizer_step = module.optimizer_step if overrides(module, Module, "optimizer_step") else None
        self.zero_grad = module.optimizer_zero_grad if overrides(module, Module, "optimizer_zero_grad") else None
        strategy = runtime.strategy
        # With loss scaling, on_before_optimizer_step and clipping see the true gradients, as in Lightning.
        precision = strategy.precision
        needs_true_grads = self.before_optimizer_step is not None or self.clip is not None
        self.unscale = precision.unscale if needs_true_grads and overrides(precision, Precision, "unscale") else None
        # Where the strategy adds nothing to the precision's step or backward, call the precision
        # directly: one Python call less on every step.
        if overrides(strategy, Strategy, "optimizer_step"):
            self.runtime_optimizer_step = strategy.optimizer_step
        else:
            self.runtime_optimizer_step = strategy.precision.optimizer_step
        if overrides(module, Module, "backward"):
            self.backward = module.backward
        elif not overrides(strategy, Strategy, "backward"):
            self.backward = strategy.precision.backward
        else:
            model = trainer.model

            def backward(loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
                strategy.backward(loss, model, *args, **kwargs)

            self.backward = backward
