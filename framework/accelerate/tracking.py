"""Experiment trackers for ``Accelerator(log_with=...)``: Accelerate's tracker classes, each over the framework's
logger of its kind (TensorBoard, W&B, MLflow), and ``GeneralTracker`` for trackers of one's own."""

import os
from typing import Any

from framework.accelerate.utils.unsupported import refused_class
from framework.errors import MisconfigurationError, describe
from framework.loggers.base import Logger
from framework.runtime.reporting import log_to


class GeneralTracker:
    """What a tracker does, for trackers of one's own given in ``log_with``: set ``name`` and
    ``requires_logging_directory``, and implement ``tracker`` (the underlying run or writer),
    ``store_init_configuration``, ``log`` and ``finish``.

    Example::

        class PrintTracker(GeneralTracker):
            name, requires_logging_directory = "print", False

            def log(self, values, step=None, **kwargs):
                print(step, values)

        accelerator = Accelerator(log_with=PrintTracker())
    """

    main_process_only = True
    name: str = ""
    requires_logging_directory: bool = False

    def __init__(self, _blank: bool = False) -> None:
        if not _blank and not type(self).name:
            raise NotImplementedError(f"{type(self).__name__} must set the class attribute `name` (the name "
                                      "get_tracker finds it by).")

    @property
    def tracker(self) -> Any:
        """The underlying run or writer (``get_tracker(name, unwrap=True)``)."""
        return None

    def start(self) -> None:
        """Called when the tracker starts, on the main process."""

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Record the run's configuration (hyperparameters)."""

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Record ``values`` at ``step``."""

    def finish(self) -> None:
        """Write what is buffered and end the run."""


class LoggerTracker(GeneralTracker):
    """A framework logger (``framework.loggers``) as a tracker: ``log`` writes its metrics, ``finish`` ends it."""

    def __init__(self, logger: Logger) -> None:
        super().__init__(_blank=True)
        self.logger = logger
        self.name = type(self).name or type(logger).__name__

    @property
    def tracker(self) -> Any:
        """The logger's underlying run or writer (``logger.experiment``)."""
        return self.logger.experiment

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Record the configuration as the logger's hyperparameters."""
        self.logger.log_hyperparams(dict(values))

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Write ``values`` (numbers or one-element tensors) at ``step``."""
        log_to([self.logger], values, step)

    def finish(self) -> None:
        """Write what is buffered and end the run."""
        self.logger.finalize("success")


class TensorBoardTracker(LoggerTracker):
    """TensorBoard event files in ``logging_dir/run_name`` (``TensorBoardLogger``); ``writer`` is its
    ``SummaryWriter``."""

    name = "tensorboard"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike, **kwargs: Any) -> None:
        from framework.loggers import TensorBoardLogger

        super().__init__(TensorBoardLogger(os.fspath(logging_dir), name=run_name, version="", **kwargs))
        self.run_name = run_name
        self.logging_dir = os.path.join(os.fspath(logging_dir), run_name)

    @property
    def writer(self) -> Any:
        """The ``SummaryWriter``."""
        return self.tracker


class WandBTracker(LoggerTracker):
    """A Weights & Biases run in project ``run_name`` (``WandbLogger``, which takes ``kwargs``); ``run`` is it."""

    name = "wandb"

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        from framework.loggers import WandbLogger

        super().__init__(WandbLogger(project=run_name, **kwargs))
        self.run_name = run_name

    @property
    def run(self) -> Any:
        """The W&B run."""
        return self.tracker


class MLflowTracker(LoggerTracker):
    """An MLflow run in experiment ``experiment_name`` (``MLFlowLogger``), stored under ``logging_dir/mlruns``
    unless ``MLFLOW_TRACKING_URI`` (or ``tracking_uri``) says where."""

    name = "mlflow"

    def __init__(self, experiment_name: str | None = None, logging_dir: str | os.PathLike | None = None,
                 run_id: str | None = None, tags: dict[str, Any] | None = None, nested_run: bool = False,
                 run_name: str | None = None, description: str | None = None, **kwargs: Any) -> None:
        from framework.loggers import MLFlowLogger

        if logging_dir is not None and "tracking_uri" not in kwargs and "save_dir" not in kwargs:
            kwargs["save_dir"] = os.path.join(os.fspath(logging_dir), "mlruns")
        super().__init__(MLFlowLogger(experiment_name=experiment_name or "Default", run_name=run_name, tags=tags,
                                      run_id=run_id, **kwargs))


_UNWRAPPED = "the framework does not wrap it; use tensorboard, wandb or mlflow, or a GeneralTracker of your own"
AimTracker = refused_class("AimTracker", _UNWRAPPED)
ClearMLTracker = refused_class("ClearMLTracker", _UNWRAPPED)
CometMLTracker = refused_class("CometMLTracker", _UNWRAPPED)
DVCLiveTracker = refused_class("DVCLiveTracker", _UNWRAPPED)
SwanLabTracker = refused_class("SwanLabTracker", _UNWRAPPED)
TrackioTracker = refused_class("TrackioTracker", _UNWRAPPED)

TRACKERS: dict[str, type[GeneralTracker]] = {"tensorboard": TensorBoardTracker, "wandb": WandBTracker,
                                             "mlflow": MLflowTracker}
SUPPORTED = tuple(TRACKERS)
# Accelerate's other trackers, named in the error that refuses them.
_ACCELERATE_ONLY = ("comet_ml", "aim", "clearml", "dvclive", "swanlab", "trackio")
_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


def register_tracker_class(tracker_class: type[GeneralTracker]) -> None:
    """Make ``log_with=tracker_class.name`` start a ``tracker_class(project_name, logging_dir, **init_kwargs)``
    (its ``logging_dir`` only when ``requires_logging_directory``)."""
    if not (isinstance(tracker_class, type) and issubclass(tracker_class, GeneralTracker) and tracker_class.name):
        raise MisconfigurationError(f"register_tracker_class({describe(tracker_class)}): accepted a GeneralTracker "
                                    "subclass with a `name`.")
    TRACKERS[tracker_class.name] = tracker_class


def requested_trackers(log_with: Any) -> list[Any]:
    """``log_with`` as a list of tracker names and tracker or logger objects, checked: "all" means every supported
    tracker whose package is installed."""
    if log_with is None:
        return []
    items = list(log_with) if isinstance(log_with, (list, tuple)) else [log_with]
    requested: list[Any] = []
    for item in items:
        name = getattr(item, "value", item)
        if not isinstance(name, str):
            if not isinstance(item, (GeneralTracker, Logger)):
                raise MisconfigurationError(f"Accelerator(log_with={describe(item)}): a tracker is a name "
                                            f"({', '.join(TRACKERS)}), a GeneralTracker or a framework.loggers.Logger.")
            requested.append(item)
        elif name.lower() == "all":
            requested.extend(tracker for tracker in SUPPORTED if _installed(tracker))
        elif name.lower() in TRACKERS:
            requested.append(name.lower())
        else:
            also = " (Accelerate has it; the framework does not wrap it)" if name.lower() in _ACCELERATE_ONLY else ""
            raise MisconfigurationError(f"Accelerator(log_with={name!r}){also}: accepted {', '.join(TRACKERS)}, "
                                        "'all', a GeneralTracker or a framework.loggers.Logger object.")
    return requested


def make_trackers(requested: list[Any], project_name: str, logging_dir: str | None,
                  init_kwargs: dict[str, Any]) -> list[GeneralTracker]:
    """The trackers for ``init_trackers``: TensorBoard in ``logging_dir/project_name``, a W&B run in project
    ``project_name``, an MLflow experiment ``project_name``; ``init_kwargs[name]`` go to each one."""
    unknown = sorted(set(init_kwargs) - set(TRACKERS))
    if unknown:
        raise MisconfigurationError(f"init_trackers(init_kwargs=...): {unknown} name no tracker; keys are tracker "
                                    f"names ({', '.join(TRACKERS)}).")
    trackers: list[GeneralTracker] = []
    for item in requested:
        if isinstance(item, Logger):
            trackers.append(LoggerTracker(item))
        elif isinstance(item, GeneralTracker):
            trackers.append(item)
        else:
            trackers.append(_started(TRACKERS[item], project_name, logging_dir, dict(init_kwargs.get(item, {}))))
    for tracker in trackers:
        tracker.start()
    return trackers


def _started(kind: type[GeneralTracker], project_name: str, logging_dir: str | None, options: dict[str, Any]
             ) -> GeneralTracker:
    if kind.requires_logging_directory:
        if logging_dir is None:
            raise MisconfigurationError(f"log_with={kind.name!r} needs a folder for its logs: pass "
                                        "Accelerator(project_dir=...) or project_config=ProjectConfiguration("
                                        "logging_dir=...).")
        return kind(project_name, logging_dir, **options)
    if kind is MLflowTracker:
        return MLflowTracker(project_name, logging_dir, **options)
    return kind(project_name, **options)


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(_PACKAGES[name]) is not None


class TrackerMethods:
    """The ``Accelerator``'s trackers: ``init_trackers``, ``log``, ``get_tracker`` and ``end_training``; it needs
    ``self._requested_trackers``, ``self.trackers``, ``self.logging_dir``, ``self.is_main_process`` and
    ``self._runtime``."""

    _requested_trackers: list[Any]
    trackers: list[GeneralTracker]
    logging_dir: str | None
    is_main_process: bool
    _runtime: Any

    def init_trackers(self, project_name: str, config: dict[str, Any] | None = None,
                      init_kwargs: dict[str, Any] | None = None) -> None:
        """Start the trackers of ``log_with`` on the main process, recording ``config``; elsewhere it does nothing.

        :param project_name: the run's name: TensorBoard writes in ``<logging_dir>/<project_name>``, W&B uses it
            as the project, MLflow as the experiment; trackers and loggers given as objects ignore it.
        :param config: the hyperparameters, given to each tracker's ``store_init_configuration`` (a copy);
            ``None`` (the default): none recorded.
        :param init_kwargs: ``{tracker name: {keyword: value}}``, passed to that tracker's constructor (for
            TensorBoard, ``TensorBoardLogger``'s, e.g. ``flush_secs``); a key naming no tracker raises
            ``MisconfigurationError``. ``None`` (the default): no extra arguments.
        """
        if not self.is_main_process:
            return
        self.trackers = make_trackers(self._requested_trackers, project_name, self.logging_dir, init_kwargs or {})
        if config is not None:
            for tracker in self.trackers:
                tracker.store_init_configuration(dict(config))

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The tracker named ``name`` (its underlying run or writer with ``unwrap``).

        :param name: the tracker's ``name``: ``"tensorboard"``, ``"wandb"``, ``"mlflow"``, a ``GeneralTracker``'s
            own, or a framework Logger's class name (``"CSVLogger"``). A name matching none raises ``ValueError``,
            also on processes other than the main, which start no tracker (Accelerate returns an empty one there).
        :param unwrap: ``True``: the tracker's ``tracker`` (TensorBoard's ``SummaryWriter``, the W&B run, a
            logger's ``experiment``); default ``False``: the tracker itself.
        :raises ValueError: where no started tracker has that ``name``.
        """
        for tracker in self.trackers:
            if tracker.name == name:
                return tracker.tracker if unwrap else tracker
        raise ValueError(f"get_tracker({name!r}): no such tracker; started: "
                         f"{[tracker.name for tracker in self.trackers]}.")

    def log(self, values: dict[str, Any], step: int | None = None, log_kwargs: dict[str, Any] | None = None) -> None:
        """Log ``values`` to every tracker, on the main process.

        :param values: names to numbers (the built-in trackers also read one-element tensors); a tracker of one's
            own gets them as they are.
        :param step: the step the values belong to; ``None`` (the default): each tracker's own default.
        :param log_kwargs: ``{tracker name: {keyword: value}}``, passed to that tracker's ``log``; the built-in
            trackers and framework loggers ignore them (Accelerate's W&B tracker hands them to ``wandb.log``).
            ``None`` (the default): none.
        """
        if self.is_main_process:
            for tracker in self.trackers:
                tracker.log(values, step=step, **(log_kwargs or {}).get(tracker.name, {}))

    def end_training(self) -> None:
        """Finish the trackers and end the process group (a barrier first)."""
        for tracker in self.trackers:
            tracker.finish()
        self._runtime.strategy.end_process_group()
