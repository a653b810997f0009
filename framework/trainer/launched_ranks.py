"""A Trainer entry point run on ranks the Trainer starts itself, and its outcome brought back to the caller.

The calling process trains nothing: it starts the ranks (``Runtime.run_in_ranks``), each runs the entry point as
an attached rank would (``rank_entry``: the Trainer's ``_run_on_this_rank``, which returns the rank's Run), and
rank 0 sends back what the caller's objects must hold afterwards (``report_of``): the trained weights for the
caller's Module, the state and counters, the metric dicts, the callbacks' and loggers' bookkeeping
(``best_model_path``, the log version), which ``adopt_rank_zero`` takes into the caller's Run. Predictions come
from every rank, concatenated in dataset order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from framework.hooks import Hook
from framework.loggers.base import Logger
from framework.nested import map_tensors
from framework.trainer.hook_runner import merge_module_callbacks
from framework.trainer.state import TrainerFn

if TYPE_CHECKING:
    from framework.trainer.run import Run

#: What a rank runs: the entry point's arguments in, the rank's Run and the entry point's outcome out.
RankEntry = Callable[..., "tuple[Run, Any]"]


def run_launched(run: Run, rank_entry: RankEntry, *arguments: Any) -> tuple[dict[str, Any], Any]:
    """Run ``rank_entry(*arguments)`` on every rank; returns rank 0's report and the outcome: rank 0's, or every
    rank's predictions in dataset order."""
    reports = run.runtime.run_in_ranks(_run_as_rank, rank_entry, arguments)
    if run.fn == TrainerFn.PREDICTING:
        return reports[0], _predictions_in_order([report["outcome"] for report in reports], reports[0]["loaders"])
    return reports[0], reports[0]["outcome"]


def _run_as_rank(runtime: Any, rank_entry: RankEntry, arguments: tuple) -> dict[str, Any]:
    run, outcome = rank_entry(*arguments)
    report: dict[str, Any] = {"outcome": _on_cpu(outcome), "loaders": len(run.context.eval_loaders["predict"])}
    weights = runtime.strategy.full_module_state_dict(run.model)  # on every rank: sharded parts are gathered
    if run.fn != TrainerFn.PREDICTING and not run.is_global_zero:
        report["outcome"] = None  # rank 0's is the one returned
    if run.is_global_zero:
        report.update(report_of(run, weights))
    return report


def report_of(run: Run, weights: dict[str, Any]) -> dict[str, Any]:
    """What rank 0 sends the caller besides the outcome (on the CPU)."""
    metrics = run.metrics
    return {
        "weights": _on_cpu(weights),
        "state": run.state,
        "metrics": _on_cpu((metrics.callback, metrics.logged, metrics.progress_bar)),
        "callbacks": {callback.state_key: _on_cpu(callback.state_dict()) for callback in run.callbacks},
        "loggers": [logger.run_state() if isinstance(logger, Logger) else None for logger in run.loggers],
        "ckpt_path": run.context.ckpt_path,
        "max_epochs": run.settings.max_epochs,
    }


def adopt_rank_zero(run: Run, report: dict[str, Any]) -> None:
    """Take into this process's run what rank 0 of ranks it started sent back (``report_of``): the trained weights,
    the state, the metric dicts, the callbacks' and loggers' bookkeeping, the checkpoint path, the settled
    ``max_epochs``."""
    take_trained_module(run, report["weights"])
    vars(run.state).update(vars(report["state"]))
    run.metrics.callback, run.metrics.logged, run.metrics.progress_bar = report["metrics"]
    # as on the ranks: the Module's configure_callbacks replace the Trainer's of the same type
    run.callbacks = merge_module_callbacks(run.callbacks, run.resolve_hooks().call(Hook.CONFIGURE_CALLBACKS))
    for callback in run.callbacks:
        state = report["callbacks"].get(callback.state_key)
        if not state:
            continue
        if getattr(callback, "dirpath", False) is None and "dirpath" in state:
            callback.dirpath = state["dirpath"]  # ModelCheckpoint resolves it in setup, which ran on the ranks
        callback.load_state_dict(state)
    for logger, state in zip(run.loggers, report["loggers"], strict=True):
        if state is not None:  # a duck-typed logger keeps no run of ours
            logger.load_run_state(state)
    run.context.ckpt_path = report["ckpt_path"]
    run.settings = dataclasses.replace(run.settings, max_epochs=report["max_epochs"])  # as the ranks settled it


def take_trained_module(run: Run, weights: dict[str, Any]) -> None:
    """Load the whole trained ``weights`` into ``run.module``, which did not train itself (ranks or a copy did),
    and make it the set-up model until a next run sets it up anew."""
    module = run.module
    if set(weights) - set(module.state_dict()):
        module.configure_model()  # the layers it builds were built on the ranks only (it must be idempotent)
    on_meta = any(tensor.is_meta for tensor in module.state_dict().values())  # built on the meta device
    if not on_meta:
        run.runtime.precision.convert_module(module)  # as on the ranks ("bf16-true": bf16 parameters)
    module.load_state_dict(weights, assign=on_meta)
    run.context.model, run.context.module_setup = module, False
    module.trainer = run.trainer


def _on_script_ranks(run: Run) -> bool:
    """Whether this process is one of the ranks that run the script again (the Trainer started them so where
    forking is unsafe): each of them must end a run as the caller of forked ranks does."""
    environment = run.runtime.environment
    return environment is not None and environment.source == "script"


def trains_a_copy(run: Run) -> bool:
    """Whether this run trains a copy of the Module: on ranks that run the script again, with a strategy that puts
    sharded parameters in place of the Module's own (the Module given then gets the whole trained weights: what the
    caller of forked ranks gets, and what a script written for them uses after ``fit``)."""
    return _on_script_ranks(run) and run.runtime.strategy.replaces_parameters


def predictions_of_every_rank(run: Run, predictions: Any) -> Any:
    """On ranks that run the script again, every rank's predictions joined in dataset order, on every rank: what
    the caller of forked ranks gets."""
    if predictions is None or not _on_script_ranks(run):
        return predictions
    per_rank = run.runtime.strategy.all_gather_object(predictions)
    return _predictions_in_order(per_rank, len(run.context.eval_loaders["predict"]))


def _predictions_in_order(per_rank: list[Any], loader_count: int) -> Any:
    """Each rank predicted a contiguous part of the data, in rank order: joined, they are the dataset's order."""
    if per_rank[0] is None:
        return None
    if loader_count <= 1:
        return [batch for predictions in per_rank for batch in predictions]
    return [[batch for predictions in per_rank for batch in predictions[index]] for index in range(loader_count)]


def _on_cpu(value: Any) -> Any:
    return map_tensors(value, lambda tensor: tensor.detach().to("cpu"))
