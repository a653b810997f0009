"""Experiment trackers for ``Accelerator(log_with=...)``: Accelerate's names made the framework's loggers."""

from __future__ import annotations

import os
from typing import Any

from framework.errors import MisconfigurationError, describe

SUPPORTED = ("tensorboard", "wandb", "mlflow")
# Accelerate's other trackers, named in the error that refuses them.
_ACCELERATE_ONLY = ("comet_ml", "aim", "clearml", "dvclive", "swanlab", "trackio")


def requested_trackers(log_with: Any) -> list[Any]:
    """``log_with`` as a list of tracker names and logger objects, checked: "all" means every supported tracker
    whose package is installed."""
    if log_with is None:
        return []
    items = list(log_with) if isinstance(log_with, (list, tuple)) else [log_with]
    names: list[Any] = []
    for item in items:
        name = getattr(item, "value", item)
        if not isinstance(name, str):
            if not callable(getattr(item, "log_metrics", None)) and not callable(getattr(item, "log", None)):
                raise MisconfigurationError(f"Accelerator(log_with={describe(item)}): a tracker is a name "
                                            f"({', '.join(SUPPORTED)}) or a framework.loggers.Logger.")
            names.append(item)
        elif name.lower() == "all":
            names.extend(tracker for tracker in SUPPORTED if _installed(tracker))
        elif name.lower() in SUPPORTED:
            names.append(name.lower())
        else:
            also = " (Accelerate has it; the framework does not wrap it)" if name.lower() in _ACCELERATE_ONLY else ""
            raise MisconfigurationError(f"Accelerator(log_with={name!r}){also}: accepted {', '.join(SUPPORTED)}, "
                                        "'all', or a framework.loggers.Logger object.")
    return names


def make_trackers(requested: list[Any], project_name: str, logging_dir: str | None,
                  init_kwargs: dict[str, Any]) -> list[Any]:
    """The loggers for ``init_trackers``: TensorBoard in ``logging_dir/project_name``, a W&B run in project
    ``project_name``, an MLflow experiment ``project_name``; ``init_kwargs[name]`` go to each one."""
    unknown = sorted(set(init_kwargs) - set(SUPPORTED))
    if unknown:
        raise MisconfigurationError(f"init_trackers(init_kwargs=...): {unknown} name no tracker; keys are tracker "
                                    f"names ({', '.join(SUPPORTED)}).")
    trackers = []
    for item in requested:
        if not isinstance(item, str):
            trackers.append(item)
            continue
        options = dict(init_kwargs.get(item, {}))
        if item == "tensorboard":
            if logging_dir is None:
                raise MisconfigurationError("log_with='tensorboard' needs a folder for its logs: pass "
                                            "Accelerator(project_dir=...) or project_config=ProjectConfiguration("
                                            "logging_dir=...).")
            from framework.loggers import TensorBoardLogger

            trackers.append(TensorBoardLogger(logging_dir, name=project_name, version="", **options))
        elif item == "wandb":
            from framework.loggers import WandbLogger

            trackers.append(WandbLogger(project=project_name, **options))
        else:
            from framework.loggers import MLFlowLogger

            if logging_dir is not None and "tracking_uri" not in options and "save_dir" not in options:
                options["save_dir"] = os.path.join(logging_dir, "mlruns")
            trackers.append(MLFlowLogger(experiment_name=project_name, **options))
    return trackers


def tracker_name(tracker: Any) -> str:
    """The name ``get_tracker`` finds a tracker by."""
    known = {"TensorBoardLogger": "tensorboard", "WandbLogger": "wandb", "MLFlowLogger": "mlflow"}
    return known.get(type(tracker).__name__, getattr(tracker, "name", type(tracker).__name__))


def store_config(trackers: list[Any], config: dict[str, Any]) -> None:
    """Each tracker records ``config`` (the run's hyperparameters)."""
    for tracker in trackers:
        if callable(getattr(tracker, "log_hyperparams", None)):
            tracker.log_hyperparams(config)
        elif callable(getattr(tracker, "store_init_configuration", None)):
            tracker.store_init_configuration(config)


def log_values(trackers: list[Any], values: dict[str, Any], step: int | None, log_kwargs: dict[str, Any]) -> None:
    """Each tracker logs ``values`` at ``step``."""
    from framework.runtime.reporting import log_to

    loggers = [tracker for tracker in trackers if callable(getattr(tracker, "log_metrics", None))]
    if loggers:
        log_to(loggers, values, step)
    for tracker in trackers:
        if tracker not in loggers:
            tracker.log(values, step=step, **log_kwargs.get(tracker_name(tracker), {}))


def finish(trackers: list[Any]) -> None:
    """Each tracker writes what it buffered and ends its run."""
    for tracker in trackers:
        if callable(getattr(tracker, "finalize", None)):
            tracker.finalize("success")
        elif callable(getattr(tracker, "finish", None)):
            tracker.finish()


def _installed(name: str) -> bool:
    import importlib.util

    module = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}[name]
    return importlib.util.find_spec(module) is not None


class TrackerMethods:
    """The ``Accelerator``'s trackers: ``init_trackers``, ``log``, ``get_tracker`` and ``end_training``; it needs
    ``self._requested_trackers``, ``self.trackers``, ``self.logging_dir``, ``self.is_main_process`` and
    ``self._runtime``."""

    _requested_trackers: list[Any]
    trackers: list[Any]
    logging_dir: str | None
    is_main_process: bool
    _runtime: Any

    def init_trackers(self, project_name: str, config: dict[str, Any] | None = None,
                      init_kwargs: dict[str, Any] | None = None) -> None:
        """Start the trackers of ``log_with`` on the main process, recording ``config``."""
        if not self.is_main_process:
            return
        self.trackers = make_trackers(self._requested_trackers, project_name, self.logging_dir,
                                               init_kwargs or {})
        if config is not None:
            store_config(self.trackers, dict(config))

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The tracker named ``name`` (its underlying run or writer with ``unwrap``)."""
        for tracker in self.trackers:
            if tracker_name(tracker) == name:
                return tracker.experiment if unwrap else tracker
        raise ValueError(f"get_tracker({name!r}): no such tracker; started: "
                         f"{[tracker_name(t) for t in self.trackers]}.")

    def log(self, values: dict[str, Any], step: int | None = None, log_kwargs: dict[str, Any] | None = None) -> None:
        """Log ``values`` to every tracker, on the main process."""
        if self.is_main_process:
            log_values(self.trackers, values, step, log_kwargs or {})

    def end_training(self) -> None:
        """Finish the trackers and end the process group (a barrier first)."""
        finish(self.trackers)
        self._runtime.strategy.end_process_group()
