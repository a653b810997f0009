"""One run of fit, validate, test or predict in this process: set-up, the loop, the end (or the failure), and the
services the loops call on every batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from framework import console
from framework.datamodule import DataModule
from framework.errors import describe
from framework.hooks import Hook, overrides
from framework.module import Module
from framework.nested import move_to_device
from framework.precision import Precision
from framework.profilers.base import profiled
from framework.runtime.preemption import Preempted
from framework.runtime.reporting import agree_on_runs, finalize, logs_on_every_rank
from framework.trainer.data import forget_fit_data
from framework.trainer.dispatch import HookRunner, lend_logging, merge_module_callbacks
from framework.trainer.eval_loop import run_predict, run_validate_or_test
from framework.trainer.fit_loop import FitLoop
from framework.trainer.launch import predictions_of_every_rank, run_launched
from framework.trainer.metrics import log_hyperparams
from framework.trainer.preemption import requeue_when_done
from framework.trainer.properties import TrainerProperties
from framework.trainer.signatures import without_unaccepted_batch_idx
from framework.trainer.state import RunningStage, TrainerFn, TrainerStatus


class TrainerRun(TrainerProperties):
    """The part of the Trainer that runs: ``_run_here`` (this process as one rank, or the only one) and
    ``_run_launched`` (ranks started for it), and what the loops call on every batch."""

    def _run_here(self, fn: TrainerFn, module: Module, loaders: dict[str, Any], ckpt_path: Any,
                  weights_only: bool | None) -> Any:
        """Run ``fn`` in this process, as one rank or the only one."""
        self.run_context.given_loaders = loaders
        self._weights_only = weights_only
        self.state.fn, self.state.status = fn, TrainerStatus.RUNNING
        self.state.stage = _FIRST_STAGE[fn]  # so setup() already sees trainer.training / testing ..., as in Lightning
        self.state.should_stop = False
        self.metrics.clear()  # each run starts with empty metric dicts, as in Lightning
        self.run_context.ckpt_path = None
        if fn == TrainerFn.FITTING:  # before setup(), which may read estimated_stepping_batches already
            forget_fit_data(self)
        stage = "fit" if fn == TrainerFn.FITTING else fn.value
        try:
            self._setup(stage)
            if fn == TrainerFn.FITTING:
                self.fit_loop = FitLoop(self)
                outcome = self.fit_loop.fit(ckpt_path)
            elif fn == TrainerFn.PREDICTING:
                outcome = predictions_of_every_rank(self, run_predict(self, ckpt_path))
            else:
                outcome = run_validate_or_test(self, fn, ckpt_path)
            self._teardown()
            self.state.status = TrainerStatus.FINISHED
            self._finalize_loggers("success")
            return outcome
        except KeyboardInterrupt as interruption:
            self.state.status = TrainerStatus.INTERRUPTED
            self._on_exception(interruption)
            self._finalize_loggers("interrupted")
            if self.world_size == 1:  # on several ranks the launcher, or the calling process, says it once
                _say_interrupted()
            raise  # so the script stops, with Ctrl-C's status (130), as any program does (Lightning exits 1)
        except BaseException as error:
            self.state.status = TrainerStatus.INTERRUPTED
            self._on_exception(error)
            self._finalize_loggers("interrupted" if isinstance(error, Preempted) else "failed")
            if isinstance(error, Preempted):
                requeue_when_done(self)
            raise
        finally:
            self.state.stage = None
            module._results = None
            if self.profiler is not None:
                self.profiler.describe()
                self.profiler.teardown(stage)
            self.runtime.teardown()

    def _run_launched(self, fn: TrainerFn, model: Module | None, datamodule: DataModule | None,
                      loaders: dict[str, Any], ckpt_path: Any, weights_only: bool | None) -> Any:
        """Start the ranks, run ``fn`` on each, and bring rank 0's outcome back into this process's objects."""
        self.state.fn, self.state.status = fn, TrainerStatus.RUNNING
        try:
            return run_launched(self, fn, model, datamodule, loaders, ckpt_path, weights_only)
        except KeyboardInterrupt:
            self.state.status = TrainerStatus.INTERRUPTED
            _say_interrupted()
            raise
        except BaseException:
            self.state.status = TrainerStatus.INTERRUPTED
            raise

    # -- outcomes of runs elsewhere ---
    def _adopt_rank_zero(self, report: dict[str, Any]) -> None:
        """Take in what rank 0 of ranks this Trainer started sent back (``launch.run_launched``): the trained
        weights, the state, the metric dicts, the callbacks' and loggers' bookkeeping, the checkpoint path."""
        module = self.module
        self._take_trained_module(module, report["weights"])
        self.state = report["state"]
        self.metrics.callback, self.metrics.logged, self.metrics.progress_bar = report["metrics"]
        # as on the ranks: the Module's configure_callbacks replace the Trainer's of the same type
        self.callbacks = merge_module_callbacks(self.callbacks, module.configure_callbacks())
        for callback in self.callbacks:
            state = report["callbacks"].get(callback.state_key)
            if not state:
                continue
            if getattr(callback, "dirpath", False) is None and "dirpath" in state:
                callback.dirpath = state["dirpath"]  # ModelCheckpoint resolves it in setup, which ran on the ranks
            callback.load_state_dict(state)
        for logger, state in zip(self.loggers, report["loggers"], strict=True):
            if state is not None:  # a duck-typed logger keeps no run of ours
                logger.load_run_state(state)
        self.run_context.ckpt_path = report["ckpt_path"]
        if self.state.fn == TrainerFn.FITTING:
            self.settle_epoch_limits()  # as the ranks did

    def _take_trained_module(self, module: Module, weights: dict[str, Any]) -> None:
        """Load the whole trained ``weights`` into ``module``, which did not train itself (ranks or a copy did), and
        make it this Trainer's Module, to be set up anew by a next run."""
        if set(weights) - set(module.state_dict()):
            module.configure_model()  # the layers it builds were built on the ranks only (it must be idempotent)
        on_meta = any(tensor.is_meta for tensor in module.state_dict().values())  # built on the meta device
        if not on_meta:
            self.runtime.precision.convert_module(module)  # as on the ranks ("bf16-true": bf16 parameters)
        module.load_state_dict(weights, assign=on_meta)
        self.module = self.model = module
        module.trainer = self
        self._module_setup = False

    def _attach(self, fn: TrainerFn, model: Module | None, datamodule: DataModule | None) -> Module:
        if model is None:
            if self.module is None:
                raise TypeError(f"trainer.{fn.value}() needs a model: pass one, or call trainer.fit(model) first.")
            model = self.module
        if not isinstance(model, Module):
            raise TypeError(f"trainer.{fn.value}(model={describe(model)}): the model must subclass framework.Module.")
        if datamodule is not None and not isinstance(datamodule, DataModule):
            raise TypeError(
                f"trainer.{fn.value}(datamodule={describe(datamodule)}): it must subclass framework.DataModule."
            )
        self.hooks = None  # until this run's are resolved, an early failure must not reach the last run's
        if model is not self.module:
            self._module_setup = False
            context = self.run_context
            context.optimizers, context.lr_scheduler_configs, context.manual_optimizers = [], [], []
        self.module = model
        model.trainer = self
        self.datamodule = datamodule
        if datamodule is not None:
            datamodule.trainer = self
        return model

    def _setup(self, stage: str) -> None:
        module = self.module
        if self.profiler is not None:  # a file per rank in a distributed run
            self.profiler.setup(stage, self.local_rank if self.world_size > 1 else None, self.log_dir)
        self.callbacks = merge_module_callbacks(self.callbacks, module.configure_callbacks())
        lend_logging(self.callbacks, module)
        self.hooks = HookRunner(self, module, self.callbacks, self.datamodule)
        self._transfer_hooks = tuple(self.hooks.get(hook) for hook in (
            Hook.ON_BEFORE_BATCH_TRANSFER, Hook.TRANSFER_BATCH_TO_DEVICE, Hook.ON_AFTER_BATCH_TRANSFER))
        precision = self.runtime.precision
        self._convert_input = precision.convert_input if overrides(precision, Precision, "convert_input") else None
        self._plain_transfer = self._convert_input is None and self.hooks.all_default(
            Hook.ON_BEFORE_BATCH_TRANSFER, Hook.TRANSFER_BATCH_TO_DEVICE, Hook.ON_AFTER_BATCH_TRANSFER
        )
        self.runtime.setup_environment()
        if self.world_size > 1:  # every rank's loggers name rank 0's run (trainer.log_dir, checkpoint dirs)
            agree_on_runs(self.loggers, self.runtime.broadcast)
        if self._prepares_data():
            self.hooks.call(Hook.PREPARE_DATA)
        self.runtime.barrier("prepare_data")
        for logger in self.loggers:  # as in Lightning: each logger's run exists (its folder, its writer) at setup
            getattr(logger, "experiment", None)
        self.runtime.barrier("pre_setup")
        self.hooks.call(Hook.SETUP, stage=self.state.fn)  # by keyword, the TrainerFn (== "fit" ...), as Lightning
        self.hooks.call(Hook.CONFIGURE_MODEL)  # every run, as in Lightning: it must be idempotent
        if not self._module_setup:
            if self.sync_batchnorm and self.world_size > 1:
                torch.nn.SyncBatchNorm.convert_sync_batchnorm(module)  # in place: the Module is no BatchNorm
            self.model = self.runtime.wrap_module(module)
            self._module_setup = True
        self._compiled_steps.use(module, self._given_compiler or self.runtime.compiler)
        self.training_step = profiled(self._profiling, "training_step", without_unaccepted_batch_idx(
            self.runtime.strategy.step_function(self.model, "training_step", synced=module.automatic_optimization,
                                                method=self._compiled_steps.method("training_step")),
            module.training_step,
        ))
        # Loggers write on global rank 0 only, except a user's own that is not rank-zero-only (as in Lightning);
        # every rank checks the hyperparameters (so all fail alike).
        self.metrics.loggers = self.loggers if self.is_global_zero else [
            logger for logger in self.loggers if logs_on_every_rank(logger)]
        self.metrics.module = module
        if self.enable_autolog_hparams:
            log_hyperparams(self.metrics.loggers, module, self.datamodule)
        for logger in self.metrics.loggers:
            logger.log_graph(module)
            logger.save()  # hparams.yaml is on disk from the start, as Lightning

    def _prepares_data(self) -> bool:
        """``prepare_data`` runs on each node's first process, or only on global rank 0 where the Module or
        DataModule sets ``prepare_data_per_node = False`` (data on a filesystem all nodes share)."""
        owners = [owner for owner in (self.module, self.datamodule) if owner is not None]
        if all(getattr(owner, "prepare_data_per_node", True) for owner in owners):
            return self.runtime.local_rank == 0
        return self.is_global_zero

    def _teardown(self) -> None:
        self.hooks.call(Hook.TEARDOWN, stage=self.state.fn)

    def _on_exception(self, error: BaseException) -> None:
        if self.hooks is None:
            return
        # The other ranks are not where this one is (they may wait in a collective of the step it left): what
        # on_exception does (ModelCheckpoint's save) runs on this rank alone.
        with self.runtime.strategy.without_collectives():
            self.hooks.call(Hook.ON_EXCEPTION, error)

    def _finalize_loggers(self, status: str) -> None:
        finalize(self.metrics.loggers, status)

    # -- services the loops call ---
    def batch_mover(self) -> Callable[[Any, int], Any]:
        """The fastest callable doing what ``transfer_batch`` does, for the loops to call on every batch."""
        if not self._plain_transfer:
            return self.transfer_batch
        device = self.runtime.device
        return lambda batch, dataloader_idx: move_to_device(batch, device)

    def transfer_batch(self, batch: Any, dataloader_idx: int) -> Any:
        """The batch-transfer hooks around moving ``batch`` to the device."""
        before, transfer, after = self._transfer_hooks
        if before is not None:
            batch = before(batch, dataloader_idx)
        batch = transfer(batch, self.runtime.device, dataloader_idx)
        if self._convert_input is not None:
            batch = self._convert_input(batch)
        return after(batch, dataloader_idx) if after is not None else batch

    def strategy_step(self, name: str) -> Any:
        """The callable that runs the step method ``name`` (e.g. ``"validation_step"``) on the set-up model."""
        return self.runtime.strategy.step_function(self.model, name, method=self._compiled_steps.method(name))


_FIRST_STAGE = {
    TrainerFn.FITTING: RunningStage.TRAINING,
    TrainerFn.VALIDATING: RunningStage.VALIDATING,
    TrainerFn.TESTING: RunningStage.TESTING,
    TrainerFn.PREDICTING: RunningStage.PREDICTING,
}


def _say_interrupted() -> None:
    console.warn_user("Detected KeyboardInterrupt: the run was stopped (trainer.state.status is 'interrupted'); "
                      "the interrupt goes on to the caller, so the script stops. To go on after it (a notebook "
                      "cell, a sweep), catch KeyboardInterrupt around the call: the Trainer can fit again "
                      "from where it stopped.")
