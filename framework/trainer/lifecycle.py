"""One run in this process, from set-up to its end or its failure: ``run_here(run, ckpt_path)``.

Set-up resolves once what every batch will use (the hook runner, the batch mover, the training step); then the
entry point's loop runs; then ``teardown``, or on an error ``on_exception``, and the loggers' last status::

    setup:    profiler, callbacks (configure_callbacks), hooks, process group, prepare_data, loggers' runs,
              setup(stage), configure_model, the model set up by the strategy, the compiled steps
    loop:     FitLoop.fit / run_validate_or_test / run_predict
    end:      teardown(stage), loggers "success"  |  on_exception, loggers "failed"/"interrupted", requeue
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from framework import console
from framework.hooks import Hook, overrides
from framework.loggers.directory import log_dir_of
from framework.nested import move_to_device
from framework.precision import Precision
from framework.profilers.base import profiled
from framework.runtime.preemption_signals import Preempted
from framework.runtime.reporting import agree_on_runs, finalize, logs_on_every_rank
from framework.trainer.eval_loop import run_predict, run_validate_or_test
from framework.trainer.fit_loop import FitLoop
from framework.trainer.hook_runner import lend_logging, merge_module_callbacks
from framework.trainer.launched_ranks import adopt_rank_zero, predictions_of_every_rank, run_launched
from framework.trainer.metrics import log_hyperparams
from framework.trainer.preemption import requeue_when_done
from framework.trainer.run import Run
from framework.trainer.signatures import without_unaccepted_batch_idx
from framework.trainer.state import RunningStage, TrainerFn, TrainerStatus


def run_here(run: Run, ckpt_path: Any) -> Any:
    """Run ``run``'s entry point in this process, as one rank or the only one; returns what the entry point
    returns (``validate``'s metrics, ``predict``'s predictions, None for ``fit``)."""
    state, fn = run.state, run.fn
    state.fn, state.status = fn, TrainerStatus.RUNNING
    state.stage = _FIRST_STAGE[fn]  # so setup() already sees trainer.training / testing ..., as in Lightning
    state.should_stop = False
    run.metrics.clear()  # each run starts with empty metric dicts, as in Lightning
    run.context.ckpt_path = None
    fit_loop = FitLoop(run) if fn == TrainerFn.FITTING else None
    run.fit_loop = fit_loop  # from the start, as Lightning's trainer.fit_loop (setup hooks may read it)
    if fit_loop is not None:  # before setup(), which may read estimated_stepping_batches already
        run.context.forget_fit_data()
    try:
        setup(run)
        if fit_loop is not None:
            outcome = fit_loop.fit(ckpt_path)
        elif fn == TrainerFn.PREDICTING:
            outcome = predictions_of_every_rank(run, run_predict(run, ckpt_path))
        else:
            outcome = run_validate_or_test(run, fn, ckpt_path)
        run.hooks.call(Hook.TEARDOWN, stage=fn)
        state.status = TrainerStatus.FINISHED
        finalize(run.metrics.loggers, "success")
        return outcome
    except KeyboardInterrupt as interruption:
        state.status = TrainerStatus.INTERRUPTED
        _on_exception(run, interruption)
        finalize(run.metrics.loggers, "interrupted")
        if run.world_size == 1:  # on several ranks the launcher, or the calling process, says it once
            say_interrupted()
        raise  # so the script stops, with Ctrl-C's status (130), as any program does (Lightning exits 1)
    except BaseException as error:
        state.status = TrainerStatus.INTERRUPTED
        _on_exception(run, error)
        finalize(run.metrics.loggers, "interrupted" if isinstance(error, Preempted) else "failed")
        if isinstance(error, Preempted):
            requeue_when_done(run)
        raise
    finally:
        state.stage = None
        run.module._results = None
        if run.profiler is not None:
            run.profiler.describe()
            run.profiler.teardown(run.stage)
        run.runtime.teardown()


def setup(run: Run) -> None:
    """Everything before the entry point's loop, in Lightning's order (see the module's docstring)."""
    module, runtime = run.module, run.runtime
    if run.profiler is not None:  # a file per rank in a distributed run
        run.profiler.setup(run.stage, runtime.local_rank if run.world_size > 1 else None,
                           log_dir_of(run.loggers, run.settings.default_root_dir))
    # the Trainer's callbacks first, to which configure_callbacks may add
    run.callbacks = merge_module_callbacks(run.callbacks, run.resolve_hooks().call(Hook.CONFIGURE_CALLBACKS))
    lend_logging(run.callbacks, module)
    run.resolve_hooks()
    runtime.setup_environment()
    if run.world_size > 1:  # every rank's loggers name rank 0's run (trainer.log_dir, checkpoint dirs)
        agree_on_runs(run.loggers, runtime.broadcast)
    if _prepares_data(run):
        run.hooks.call(Hook.PREPARE_DATA)
    runtime.barrier("prepare_data")
    for logger in run.loggers:  # as in Lightning: each logger's run exists (its folder, its writer) at setup
        getattr(logger, "experiment", None)
    runtime.barrier("pre_setup")
    run.hooks.call(Hook.SETUP, stage=run.fn)  # by keyword, the TrainerFn (== "fit" ...), as Lightning
    run.hooks.call(Hook.CONFIGURE_MODEL)  # every run, as in Lightning: it must be idempotent
    settings = run.settings
    runtime.strategy.set_training_options(settings.accumulate_grad_batches, settings.gradient_clip_val,
                                          settings.gradient_clip_algorithm)
    _set_up_model(run)
    run.move_batch = batch_mover(run)
    _set_up_loggers(run)


def _set_up_model(run: Run) -> None:
    """The model the strategy wraps (once per Module), and the training step that runs it."""
    module, context = run.module, run.context
    if not context.module_setup:
        if run.settings.sync_batchnorm and run.world_size > 1:
            torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)  # in place: the Module is no BatchNorm
        context.model = run.runtime.wrap_module(module)
        context.module_setup = True
    context.compiled_steps.use(module, context.given_compiler or run.runtime.compiler)
    run.training_step = profiled(run.profiling, "training_step", without_unaccepted_batch_idx(
        run.runtime.strategy.step_function(context.model, "training_step", synced=module.automatic_optimization,
                                           method=context.compiled_steps.method("training_step")),
        module.training_step,
    ))


def _set_up_loggers(run: Run) -> None:
    # Loggers write on global rank 0 only, except a user's own that is not rank-zero-only (as in Lightning);
    # every rank checks the hyperparameters (so all fail alike).
    metrics = run.metrics
    metrics.loggers = run.loggers if run.is_global_zero else [
        logger for logger in run.loggers if logs_on_every_rank(logger)]
    metrics.module = run.module
    if run.settings.enable_autolog_hparams:
        log_hyperparams(metrics.loggers, run.module, run.datamodule)
    for logger in metrics.loggers:
        logger.log_graph(run.module)
        logger.save()  # hparams.yaml is on disk from the start, as Lightning


def _prepares_data(run: Run) -> bool:
    """``prepare_data`` runs on each node's first process, or only on global rank 0 where the Module or
    DataModule sets ``prepare_data_per_node = False`` (data on a filesystem all nodes share)."""
    owners = [owner for owner in (run.module, run.datamodule) if owner is not None]
    if all(getattr(owner, "prepare_data_per_node", True) for owner in owners):
        return run.runtime.local_rank == 0
    return run.is_global_zero


def _on_exception(run: Run, error: BaseException) -> None:
    if run.hooks is None:
        return
    # The other ranks are not where this one is (they may wait in a collective of the step it left): what
    # on_exception does (ModelCheckpoint's save) runs on this rank alone.
    with run.runtime.strategy.without_collectives():
        run.hooks.call(Hook.ON_EXCEPTION, error)


def batch_mover(run: Run) -> Callable[[Any, int], Any]:
    """The fastest callable that moves a batch to the device through the batch-transfer hooks, for the loops to
    call on every batch: a plain move where nothing overrides those hooks and the precision converts no input."""
    hooks, device = run.hooks, run.runtime.device
    precision = run.runtime.precision
    convert_input = precision.convert_input if overrides(precision, Precision, "convert_input") else None
    before, transfer, after = (hooks.get(hook) for hook in _TRANSFER_HOOKS)
    if convert_input is None and hooks.all_default(*_TRANSFER_HOOKS):
        return lambda batch, dataloader_idx: move_to_device(batch, device)

    def transfer_batch(batch: Any, dataloader_idx: int) -> Any:
        if before is not None:
            batch = before(batch, dataloader_idx)
        batch = transfer(batch, device, dataloader_idx)
        if convert_input is not None:
            batch = convert_input(batch)
        return after(batch, dataloader_idx) if after is not None else batch

    return transfer_batch


_TRANSFER_HOOKS = (Hook.ON_BEFORE_BATCH_TRANSFER, Hook.TRANSFER_BATCH_TO_DEVICE, Hook.ON_AFTER_BATCH_TRANSFER)

_FIRST_STAGE = {
    TrainerFn.FITTING: RunningStage.TRAINING,
    TrainerFn.VALIDATING: RunningStage.VALIDATING,
    TrainerFn.TESTING: RunningStage.TESTING,
    TrainerFn.PREDICTING: RunningStage.PREDICTING,
}


def run_on_started_ranks(run: Run, rank_entry: Callable[..., tuple[Run, Any]], *arguments: Any) -> Any:
    """Start the ranks, run ``rank_entry(*arguments)`` on each, and take rank 0's outcome into this process's
    objects (its Trainer's state, metrics, callbacks and weights)."""
    run.state.fn, run.state.status = run.fn, TrainerStatus.RUNNING
    try:
        report, outcome = run_launched(run, rank_entry, *arguments)
    except BaseException as error:
        run.state.status = TrainerStatus.INTERRUPTED
        if isinstance(error, KeyboardInterrupt):
            say_interrupted()
        raise
    adopt_rank_zero(run, report)
    return outcome


def say_interrupted() -> None:
    """The warning a Ctrl-C gets, once per job."""
    console.warn_user("Detected KeyboardInterrupt: the run was stopped (trainer.state.status is 'interrupted'); "
                      "the interrupt goes on to the caller, so the script stops. To go on after it (a notebook "
                      "cell, a sweep), catch KeyboardInterrupt around the call: the Trainer can fit again "
                      "from where it stopped.")
