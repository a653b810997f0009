"""A Trainer entry point run on ranks the Trainer starts itself, and its outcome brought back to the caller.

The calling process trains nothing: it starts the ranks (``Runtime.run_in_ranks``), each runs
the entry point as an attached rank would, and rank 0 sends back what the caller's objects
must hold afterwards: the trained weights for the caller's Module, the state and counters,
the metric dicts, the callbacks' and loggers' bookkeeping (``best_model_path``, the log
version), which the Trainer takes in (``TrainerRun._adopt_rank_zero``). Predictions come from every rank,
concatenated in dataset order.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from framework.loggers.base import Logger
from framework.nested import map_tensors
from framework.trainer.state import TrainerFn

if TYPE_CHECKING:
    from framework.trainer.trainer import Trainer


def run_launched(trainer: Trainer, fn: TrainerFn, model: Any, datamodule: Any, loaders: dict[str, Any],
                 ckpt_path: Any, weights_only: bool | None) -> Any:
    """Run ``fn`` on every rank and update ``trainer`` and its Module with rank 0's outcome."""
    reports = trainer.runtime.run_in_ranks(_run_as_rank, trainer, fn, model, datamodule, loaders, ckpt_path,
                                           weights_only)
    trainer._adopt_rank_zero(reports[0])
    if fn == TrainerFn.PREDICTING:
        return _predictions_in_order([report["outcome"] for report in reports], reports[0]["loaders"])
    return reports[0]["outcome"]


def _run_as_rank(runtime: Any, trainer: Trainer, fn: TrainerFn, model: Any, datamodule: Any, loaders: dict[str, Any],
                 ckpt_path: Any, weights_only: bool | None) -> dict[str, Any]:
    outcome = trainer._run(fn, model, datamodule, loaders, ckpt_path, weights_only)
    report: dict[str, Any] = {"outcome": _on_cpu(outcome), "loaders": len(trainer.run_context.eval_loaders["predict"])}
    weights = runtime.strategy.full_module_state_dict(trainer.model)  # on every rank: sharded parts are gathered
    if fn != TrainerFn.PREDICTING and not trainer.is_global_zero:
        report["outcome"] = None  # rank 0's is the one returned
    if trainer.is_global_zero:
        metrics = trainer.metrics
        report.update(
            weights=_on_cpu(weights),
            state=trainer.state,
            metrics=_on_cpu((metrics.callback, metrics.logged, metrics.progress_bar)),
            callbacks={callback.state_key: _on_cpu(callback.state_dict()) for callback in trainer.callbacks},
            loggers=[logger.run_state() if isinstance(logger, Logger) else None for logger in trainer.loggers],
            ckpt_path=trainer.ckpt_path,
        )
    return report


def _on_script_ranks(trainer: Trainer) -> bool:
    """Whether this process is one of the ranks that run the script again (the Trainer started them so where
    forking is unsafe): each of them must end a run as the caller of forked ranks does."""
    environment = trainer.runtime.environment
    return environment is not None and environment.source == "script"


def trains_a_copy(trainer: Trainer) -> bool:
    """Whether this run trains a copy of the Module: on ranks that run the script again, with a strategy that puts
    sharded parameters in place of the Module's own."""
    return _on_script_ranks(trainer) and trainer.runtime.strategy.replaces_parameters


def run_on_a_copy(trainer: Trainer, module: Any, run: Callable[[Any], Any]) -> Any:
    """``run(copy of module)``, then ``module`` holds the whole trained weights: what the caller of forked ranks
    gets, and what a script written for them uses after ``fit`` (a plain Module, not a sharded one)."""
    outcome = run(copy.deepcopy(module))
    trainer._take_trained_module(module, trainer.runtime.strategy.full_module_state_dict(trainer.model))
    return outcome


def predictions_of_every_rank(trainer: Trainer, predictions: Any) -> Any:
    """On ranks that run the script again, every rank's predictions joined in dataset order, on every rank: what
    the caller of forked ranks gets."""
    if predictions is None or not _on_script_ranks(trainer):
        return predictions
    per_rank = trainer.runtime.strategy.all_gather_object(predictions)
    return _predictions_in_order(per_rank, len(trainer.run_context.eval_loaders["predict"]))


def _predictions_in_order(per_rank: list[Any], loader_count: int) -> Any:
    """Each rank predicted a contiguous part of the data, in rank order: joined, they are the dataset's order."""
    if per_rank[0] is None:
        return None
    if loader_count <= 1:
        return [batch for predictions in per_rank for batch in predictions]
    return [[batch for predictions in per_rank for batch in predictions[index]] for index in range(loader_count)]


def _on_cpu(value: Any) -> Any:
    return map_tensors(value, lambda tensor: tensor.detach().to("cpu"))
