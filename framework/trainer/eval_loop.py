"""The validation, test and predict loops (validation also runs inside ``fit``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import IterableDataset

from framework.callbacks.prediction_writer import BasePredictionWriter
from framework.errors import MisconfigurationError
from framework.hooks import Hook, overrides
from framework.module import Module
from framework.nested import move_to_device
from framework.profilers.base import profiled, profiled_batches
from framework.trainer.checkpoint_paths import restore_for_evaluation
from framework.trainer.data import INFINITE, any_rank_has_batches, eval_data, limited
from framework.trainer.metrics import step_views, to_floats
from framework.trainer.prediction_state import PredictionState, recording_indices
from framework.trainer.results import Results
from framework.trainer.signatures import check_dataloader_idx, without_unaccepted_batch_idx
from framework.trainer.state import RunningStage, TrainerFn

if TYPE_CHECKING:
    from framework.trainer.run import Run


@dataclass(frozen=True)
class _Names:
    stage: str
    step: str
    model_eval: Hook
    model_train: Hook | None
    start: Hook
    epoch_start: Hook
    batch_start: Hook
    batch_end: Hook
    epoch_end: Hook
    end: Hook


_LOOPS = {
    "validate": _Names(
        "validation", "validation_step", Hook.ON_VALIDATION_MODEL_EVAL, Hook.ON_VALIDATION_MODEL_TRAIN,
        Hook.ON_VALIDATION_START, Hook.ON_VALIDATION_EPOCH_START, Hook.ON_VALIDATION_BATCH_START,
        Hook.ON_VALIDATION_BATCH_END, Hook.ON_VALIDATION_EPOCH_END, Hook.ON_VALIDATION_END,
    ),
    "test": _Names(
        "test", "test_step", Hook.ON_TEST_MODEL_EVAL, Hook.ON_TEST_MODEL_TRAIN, Hook.ON_TEST_START,
        Hook.ON_TEST_EPOCH_START, Hook.ON_TEST_BATCH_START, Hook.ON_TEST_BATCH_END,
        Hook.ON_TEST_EPOCH_END, Hook.ON_TEST_END,
    ),
    "predict": _Names(
        "predict", "predict_step", Hook.ON_PREDICT_MODEL_EVAL, None, Hook.ON_PREDICT_START,
        Hook.ON_PREDICT_EPOCH_START, Hook.ON_PREDICT_BATCH_START, Hook.ON_PREDICT_BATCH_END,
        Hook.ON_PREDICT_EPOCH_END, Hook.ON_PREDICT_END,
    ),
}


def run_validate_or_test(run: Run, fn: TrainerFn, ckpt_path: Any) -> list[dict[str, float]]:
    """``trainer.validate`` or ``trainer.test`` once set up: restore, ask for the loaders, run the loop."""
    kind = "validate" if fn == TrainerFn.VALIDATING else "test"
    stage = "val" if kind == "validate" else "test"
    step_name = _LOOPS[kind].step
    module = run.module
    if not overrides(module, Module, step_name):
        raise MisconfigurationError(f"trainer.{fn.value}() needs {type(module).__qualname__}.{step_name}.")
    restore_for_evaluation(run, ckpt_path)  # first, so a restored DataModule builds the loaders
    module.zero_grad()  # as Lightning at a run's start: no earlier gradient holds memory
    limit = getattr(run.settings, f"limit_{stage}_batches")
    if limit == 0:  # as in Lightning: the loop is skipped without asking for its loaders
        return []
    loaders, limits = eval_data(run, stage, limit)
    run.context.eval_loaders[stage], run.context.eval_batches[stage] = loaders, limits
    if not any_rank_has_batches(run, limits):  # limit_*_batches=0: the loop is skipped, as in Lightning
        return []
    run.state.stage = RunningStage.VALIDATING if kind == "validate" else RunningStage.TESTING
    return run_evaluation(run, kind, loaders, limits)


def run_predict(run: Run, ckpt_path: Any) -> list[Any] | None:
    """``trainer.predict`` once set up: restore, ask for the loaders, run the loop, keep what was asked for."""
    module = run.module
    if module.predict_step is None:  # set so; the default one needs no override
        raise MisconfigurationError(f"trainer.predict() needs {type(module).__qualname__}.predict_step, which is "
                                    "None: define it, or delete the attribute to use the default (self(batch)).")
    if not overrides(module, Module, "predict_step") and not _has_forward(module):
        raise MisconfigurationError(f"trainer.predict() needs {type(module).__qualname__}.predict_step or .forward, "
                                    "and it has neither: define predict_step(self, batch, batch_idx) to say what a "
                                    "prediction is, or forward (the default predict_step returns self(batch)).")
    restore_for_evaluation(run, ckpt_path)
    module.zero_grad()
    if run.settings.limit_predict_batches == 0:  # as in Lightning: the loop is skipped without asking for its loaders
        return [] if run.keep_predictions else None
    loaders, limits = eval_data(run, "predict", run.settings.limit_predict_batches)
    state = run.context.predict_loop = PredictionState(len(loaders))
    writers = [callback for callback in run.callbacks if isinstance(callback, BasePredictionWriter)]
    if writers:  # they are told each prediction's sample indices
        loaders, state.recorders = (list(parts) for parts in zip(*map(recording_indices, loaders), strict=True))
    run.context.eval_loaders["predict"], run.context.eval_batches["predict"] = loaders, limits
    if not any_rank_has_batches(run, limits):  # limit_predict_batches=0: the loop is skipped, as in Lightning
        return [] if run.keep_predictions else None
    run.state.stage = RunningStage.PREDICTING
    module._logging_refused_in = "predict_step"  # as in Lightning, predicting logs nothing
    keep = run.keep_predictions or any(writer.interval.on_epoch for writer in writers)
    try:
        predictions = run_evaluation(run, "predict", loaders, limits, keep=keep)
    finally:
        module._logging_refused_in = None
    return predictions if run.keep_predictions else None


def _has_forward(module: torch.nn.Module) -> bool:
    return "forward" in vars(module) or type(module).forward is not torch.nn.Module.forward


def run_evaluation(run: Run, kind: str, loaders: list, limits: list[float],
                   keep: bool = False) -> list[dict[str, Any]]:
    """Run ``kind`` ("validate", "test" or "predict") over ``loaders``.

    Returns, for validate/test, one dict of epoch metrics per loader; for predict, one list
    of batch predictions per loader (or the list itself with one loader), when ``keep``.
    """
    names = _LOOPS[kind]
    hooks, module, metrics = run.hooks, run.module, run.metrics
    modes = {sub: sub.training for sub in module.modules()}
    run.runtime.strategy.broadcast_buffers(run.model)  # every rank evaluates the model rank 0 saves
    hooks.call(names.model_eval)
    results = Results(training=False, distributed=run.world_size > 1)
    module._results = results
    training_results, metrics.live = metrics.live, results
    if training_results is not None:  # training's step values stay in callback_metrics through validation
        metrics.store(step_views(training_results))
    outputs: list[Any] = []
    # Inside fit, validation runs under no_grad, as in Lightning: tensors it creates may be reused by
    # training, which inference-mode tensors cannot be.
    inference = (run.settings.inference_mode and run.state.fn != TrainerFn.FITTING
                 and run.runtime.strategy.supports_inference_mode)
    try:
        with _grad_off(inference):
            hooks.call(names.start)
            hooks.call(names.epoch_start)
            predicting = kind == "predict"
            fewest, same = _batches_on_every_rank(run, loaders, limits)
            with run.runtime.strategy.evaluating(run.model, every_rank_same_batches=same):
                outputs = _run_batches(run, names, results, loaders, limits, predicting,
                                       keep=predicting and keep, synced_batches=None if predicting else fewest)
            results.dataloader_idx = None  # epoch-end logs belong to no single loader
            if predicting:
                run.context.predict_loop._predictions = outputs
                outputs = run.context.predict_loop.predictions
                hooks.call(names.epoch_end)
            else:
                run.metrics.end_epoch_of(results)
                hooks.call_epoch_end(names.epoch_end, run.metrics.refresh_ending)
                run.metrics.end_epoch_of(None)
                outputs = _finish(run, results, len(loaders))
            hooks.call(names.end)
    finally:
        module._results = run.train_results if run.state.stage == RunningStage.TRAINING else None
        metrics.live = training_results
        results.reset()
    if names.model_train is not None and overrides(module, Module, names.model_train.value):
        hooks.call(names.model_train)
    else:  # give every submodule back the mode it had (a frozen backbone stays in eval)
        for sub, training in modes.items():
            sub.training = training
    return outputs


def _batches_on_every_rank(run: Run, loaders: list, limits: list[float]) -> tuple[list[float] | None, bool]:
    """How many batches of each loader every rank runs (unknown lengths count as none, and so do an iterable
    dataset's: its ``__len__`` may promise batches a rank's own part of the stream does not have), and
    whether every rank runs as many as the others (known lengths only).

    Each rank evaluates its own part of the data, so one rank may run a batch more than
    another; a step value logged with ``sync_dist`` is reduced across the ranks in the batches
    all of them run, and stays this rank's own in a batch only some run (a collective there
    would wait for ranks that never come).
    """
    if run.world_size == 1:
        return None, True  # nothing to sync
    counts = torch.tensor([-1.0 if limit == INFINITE or isinstance(getattr(loader, "dataset", None), IterableDataset)
                           else float(limit) for loader, limit in zip(loaders, limits, strict=True)])
    bounds = run.runtime.strategy.all_reduce(torch.cat([counts, -counts]), "min").tolist()  # one collective
    fewest, most = bounds[:len(counts)], [-value for value in bounds[len(counts):]]
    return [max(0.0, value) for value in fewest], fewest == most and min(fewest, default=0.0) >= 0


def _run_batches(run: Run, names: _Names, results: Results, loaders: list, limits: list[float],
                 predicting: bool, keep: bool, synced_batches: list[float] | None) -> list[Any]:
    hooks = run.hooks
    several = len(loaders) > 1
    step = _step_for(run, names, several)
    batch_start, batch_end = hooks.get(names.batch_start), hooks.get(names.batch_end)
    move = run.move_batch
    record_logs = run.module._record_logs_of_compiled_step
    collected: list[list[Any]] = []
    reduce = run.runtime.strategy.all_reduce
    predict_loop = run.context.predict_loop
    prediction_state = predict_loop if predicting and predict_loop.recorders else None
    for dataloader_idx, (loader, limit) in enumerate(zip(loaders, limits, strict=True)):
        extra = (dataloader_idx,) if several else ()
        predictions: list[Any] = []
        for batch_idx, batch in enumerate(profiled_batches(run.profiling, f"{names.stage}_dataloader_next",
                                                           limited(loader, limit))):
            batch = move(batch, dataloader_idx)
            results.start_batch(batch, dataloader_idx if several else None)
            if synced_batches is not None:
                results.step_sync = reduce if batch_idx < synced_batches[dataloader_idx] else None
            if prediction_state is not None:
                prediction_state.note_batch(dataloader_idx, batch_idx, keep_indices=True)
            if batch_start is not None:
                batch_start(batch, batch_idx, *extra)
            with run.runtime.autocast():
                output = step(batch, batch_idx, *extra)
            record_logs()
            if keep:  # on the CPU, so a long predict run does not fill the accelerator's memory
                predictions.append(move_to_device(output, _CPU))
            if batch_end is not None:
                batch_end(output, batch, batch_idx, *extra)
            results.in_batch = False
            if not predicting:
                _log_step(run, results)
        collected.append(predictions)
    return collected if keep else []


def _step_for(run: Run, names: _Names, several: bool) -> Any:
    """The step callable, taking ``(batch, batch_idx, *dataloader_idx)``; signatures checked first."""
    module = run.module
    owner = type(module).__qualname__
    method = getattr(module, names.step)
    check_dataloader_idx(method, owner, names.step, names.stage, several)
    for hook in (names.batch_start, names.batch_end):
        if overrides(module, Module, hook.value):
            check_dataloader_idx(getattr(module, hook.value), owner, hook.value, names.stage, several)
    return profiled(run.profiling, names.step, without_unaccepted_batch_idx(run.step_function(names.step),
                                                                               method))


def _finish(run: Run, results: Results, num_loaders: int) -> list[dict[str, float]]:
    """Store and log the epoch's metrics; one dict of floats per dataloader.

    The sanity check's values are kept (its ``on_validation_end`` sees them, as in Lightning)
    but reach no logger and are forgotten when it ends.
    """
    state = run.state
    if state.stage == RunningStage.SANITY_CHECKING:
        run.metrics.keep_epoch(results)
        return []
    # Inside fit, validation logs at the step of the training batch it followed, as in Lightning.
    step = state.epoch_row_step if state.fn == TrainerFn.FITTING else state.batches_stepped
    metrics = to_floats(run.metrics.log_epoch(results, step, state.current_epoch))
    return [{key: value for key, value in metrics.items() if _of_loader(results, key, idx)}
            for idx in range(num_loaders)]


def _of_loader(results: Results, key: str, idx: int) -> bool:
    """Whether ``key`` belongs in loader ``idx``'s results: its suffix says so, or, logged without one, it was
    logged while that loader ran (or at an epoch's end, for every loader), as in Lightning."""
    if "/dataloader_idx_" in key:
        return key.endswith(f"/dataloader_idx_{idx}")
    loaders = results.logged_from(key)
    return not loaders or idx in loaders


def _log_step(run: Run, results: Results) -> None:
    """Step-level values logged in validation/test go to loggers every batch, numbered per loop
    (not in the sanity check); ``logged_metrics`` and the progress bar get them either way."""
    steps = run.metrics.eval_steps
    loader = results.dataloader_idx or 0
    step = steps.get(loader, 0)
    if results.step_values():
        to_loggers = run.state.stage != RunningStage.SANITY_CHECKING
        run.metrics.log_step(results, step, epoch=None, to_loggers=to_loggers)
    steps[loader] = step + 1


_CPU = torch.device("cpu")


def _grad_off(inference_mode: bool) -> Any:
    return torch.inference_mode() if inference_mode else torch.no_grad()
