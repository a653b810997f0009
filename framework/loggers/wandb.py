"""``WandbLogger``: metrics, hyperparameters, media and checkpoints in a Weights & Biases run
(``pip install "framework[wandb]"``)."""

import json
import os
import warnings
from argparse import Namespace
from collections.abc import Mapping
from typing import Any, Literal

from framework.errors import MisconfigurationError, require_package
from framework.loggers.base import Logger, NoOpExperiment, with_prefix
from framework.loggers.directory import as_dict
from framework.loggers.uploads import (
    CheckpointUploading,
    aliases_of,
    check_log_model,
    checkpoint_metadata,
)
from framework.utilities.rank_zero import rank_zero_only

_STEP_KEY = "trainer/global_step"


class WandbLogger(CheckpointUploading, Logger):
    """Logs to a W&B run, made on first use on global rank 0 (other ranks get a no-op experiment).

    The arguments are Lightning's. Metrics are plotted against ``trainer/global_step``.
    ``logger.experiment`` is the ``wandb`` run.

    As in Lightning the run is not finished when training ends, so ``trainer.test`` afterwards, or your own
    ``wandb.log``, go to the same run; call ``wandb.finish()`` before starting another.

    :param name: the run's display name; ``None`` (default): W&B's choice.
    :param save_dir: where the run's files go (in ``<save_dir>/wandb``; default ``"."``).
    :param version: the id of a run to go on with (or to give a new run); wins over ``id``.
    :param offline: True: nothing leaves the machine (``wandb sync`` later); refused with ``log_model``.
    :param dir: as ``save_dir``, and wins over it.
    :param id: as ``version``.
    :param anonymous: True lets W&B log without an account (``anonymous="allow"``); default ``None``.
    :param project: the W&B project; ``None`` (default): ``$WANDB_PROJECT``, else ``"lightning_logs"``.
    :param log_model: False (default): no checkpoints; True: the checkpoint callback's best, last and top-k
        files as artifacts after a successful fit (at once when it keeps every file); ``"all"``: each when saved.
    :param experiment: a ``wandb`` run to log to instead of starting one (default ``None``).
    :param prefix: put before each metric's name, joined with ``-`` (default ``""``: none).
    :param checkpoint_name: the name of the checkpoints' artifact; ``None`` (default): ``model-<run id>``.
    :param add_file_policy: the ``policy`` of ``wandb.Artifact.add_file`` for checkpoints: ``"mutable"``
        (default: copied first) or ``"immutable"``.
    :param kwargs: other keyword arguments, for ``wandb.init`` (``entity``, ``group``, ``tags``, ``mode``...).
    :raises MisconfigurationError: where wandb is not installed (a ``MissingPackageError``), ``log_model`` is none
        of False, True and "all", or ``log_model`` is set with ``offline=True``.

    Example::

        logger = WandbLogger(project="digits", offline=True)
        logger.watch(model, log="all")
        Trainer(logger=logger).fit(model)
    """

    #: Between the ``prefix`` and a metric's name.
    LOGGER_JOIN_CHAR = "-"

    def __init__(self, name: str | None = None, save_dir: str | os.PathLike | None = ".", version: str | None = None,
                 offline: bool = False, dir: str | os.PathLike | None = None, id: str | None = None,
                 anonymous: bool | None = None, project: str | None = None,
                 log_model: Literal["all"] | bool = False, experiment: Any = None, prefix: str = "",
                 checkpoint_name: str | None = None, add_file_policy: Literal["mutable", "immutable"] = "mutable",
                 **kwargs: Any) -> None:
        require_package("wandb", "WandbLogger", extra="wandb")
        check_log_model("WandbLogger", log_model)
        if offline and log_model:
            raise MisconfigurationError(f"WandbLogger(log_model={log_model!r}, offline=True): checkpoints cannot be "
                                        "uploaded offline. Set offline=False to log them, or log_model=False.")
        folder = dir if dir is not None else save_dir
        self._wandb_init: dict[str, Any] = {
            "name": name, "project": project or os.environ.get("WANDB_PROJECT", "lightning_logs"),
            "dir": os.fspath(folder) if folder is not None else None, "id": version or id, "resume": "allow",
        }
        if anonymous:  # passing None as well makes wandb warn that the setting has no effect
            self._wandb_init["anonymous"] = "allow"
        if offline:  # as an argument rather than WANDB_MODE, so later runs in the process are not offline too
            self._wandb_init["mode"] = "offline"
        self._wandb_init.update(kwargs)
        self._start_uploads(log_model)
        self._prefix = prefix
        self._experiment = experiment
        self._checkpoint_name = checkpoint_name
        self.add_file_policy = add_file_policy

    @property
    def experiment(self) -> Any:
        """The ``wandb`` run (a no-op object on ranks other than 0), started on first use; a run already in
        progress in the process is taken over, with a warning."""
        if rank_zero_only.rank != 0:
            return NoOpExperiment()
        if self._experiment is None:
            self._experiment = self._start_run()
        return self._experiment

    @property
    def name(self) -> str | None:
        """The project, as Lightning names it (checkpoints go to ``<save_dir>/<project>/<run id>/checkpoints``)."""
        return self._wandb_init.get("project")

    @property
    def version(self) -> str | None:
        """The run's id (the run is started on rank 0 to know it)."""
        if rank_zero_only.rank == 0:
            return self.experiment.id
        return self._wandb_init.get("id")

    @property
    def save_dir(self) -> str | None:
        """The folder the run's files go under (in ``<save_dir>/wandb``)."""
        return self._wandb_init.get("dir")

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None = None) -> None:
        """Hyperparameters into the run's config (functions and classes by their name, other values JSON cannot
        hold as their string)."""
        if rank_zero_only.rank != 0:
            return
        params = {key: _json_ready(_named(value)) for key, value in as_dict(params).items()}
        self.experiment.config.update(params, allow_val_change=True)

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """Metrics, with the step as ``trainer/global_step`` (the x-axis of every chart)."""
        if rank_zero_only.rank != 0:
            return
        metrics = with_prefix(metrics, self._prefix, self.LOGGER_JOIN_CHAR)
        if step is not None and not self._wandb_init.get("sync_tensorboard"):
            metrics = {**metrics, _STEP_KEY: step}
        self.experiment.log(metrics)

    def log_table(self, key: str, columns: list[str] | None = None, data: list[list[Any]] | None = None,
                  dataframe: Any = None, step: int | None = None) -> None:
        """A ``wandb.Table`` from ``columns`` and ``data`` rows, or from a pandas ``dataframe``.

        :param key: the name it is logged under.
        :param columns: the column names, for ``data``.
        :param data: the rows, each a list of values.
        :param dataframe: a pandas DataFrame, in place of ``columns`` and ``data``.
        :param step: the step it is logged at (as ``trainer/global_step``); ``None`` (default): W&B's own step.
        """
        import wandb

        self.log_metrics({key: wandb.Table(columns=columns, data=data, dataframe=dataframe)}, step)

    def log_text(self, key: str, columns: list[str] | None = None, data: list[list[str]] | None = None,
                 dataframe: Any = None, step: int | None = None) -> None:
        """Text as a table (W&B shows text in tables); the arguments are ``log_table``'s."""
        self.log_table(key, columns, data, dataframe, step)

    def log_image(self, key: str, images: list[Any], step: int | None = None, **kwargs: Any) -> None:
        """Images (arrays, tensors, PIL images or paths); each keyword is a list with one item per image
        (``caption=[...]``).

        :param key: the name they are logged under.
        :param images: a list of images.
        :param step: the step they are logged at; ``None`` (default): W&B's own step.
        :param kwargs: lists as long as ``images``, each item going to that image's ``wandb.Image``.
        """
        self._log_media(key, "Image", "images", images, step, kwargs)

    def log_audio(self, key: str, audios: list[Any], step: int | None = None, **kwargs: Any) -> None:
        """Audio clips; keywords as ``log_image`` (``sample_rate=[...]``)."""
        self._log_media(key, "Audio", "audios", audios, step, kwargs)

    def log_video(self, key: str, videos: list[Any], step: int | None = None, **kwargs: Any) -> None:
        """Videos; keywords as ``log_image`` (``fps=[...]``)."""
        self._log_media(key, "Video", "videos", videos, step, kwargs)

    def watch(self, model: Any, log: str | None = "gradients", log_freq: int = 100, log_graph: bool = True) -> None:
        """Let W&B record the model's gradients (and parameters with ``log="all"``) every ``log_freq`` steps.

        :param model: the module to watch.
        :param log: ``"gradients"`` (default), ``"parameters"``, ``"all"`` or ``None`` (neither).
        :param log_freq: every how many batches to record them (default 100).
        :param log_graph: True (default) also records the model's graph.
        """
        self.experiment.watch(model, log=log, log_freq=log_freq, log_graph=log_graph)

    def use_artifact(self, artifact: str, artifact_type: str | None = None) -> Any:
        """Declare ``artifact`` an input of this run and return it (``.download()`` to get its files).

        :param artifact: the artifact's name, ``"name:alias"`` or ``"entity/project/name:alias"``.
        :param artifact_type: its type (``"model"``...); ``None`` (default): any.
        """
        return self.experiment.use_artifact(artifact, type=artifact_type)

    @staticmethod
    def download_artifact(artifact: str, save_dir: str | os.PathLike | None = None,
                          artifact_type: str | None = None, use_artifact: bool | None = True) -> str:
        """Download ``artifact`` (``"entity/project/name:alias"``) and return the folder it went to.

        :param artifact: the artifact's name.
        :param save_dir: where to put its files; ``None`` (default): W&B's default folder.
        :param artifact_type: its type, when read through the W&B API; ``None`` (default): any.
        :param use_artifact: True (default), while a run is active: declare it an input of that run too.
        """
        import wandb

        if wandb.run is not None and use_artifact:
            found = wandb.run.use_artifact(artifact)
        else:
            found = wandb.Api().artifact(artifact, type=artifact_type)
        return found.download(root=os.fspath(save_dir) if save_dir is not None else None)

    @rank_zero_only
    def log_restart(self, record: dict[str, Any]) -> None:
        """The record in the run's summary, as ``framework/restart_<n>``."""
        self.experiment.summary[f"framework/restart_{record['restart']}"] = json.dumps(record)

    def finalize(self, status: str) -> None:
        """After a successful run, upload the checkpoints kept for the end (the run goes on; see the class)."""
        if status != "success" or self._experiment is None or rank_zero_only.rank != 0:
            return
        self._upload_kept()

    def run_state(self) -> dict[str, Any]:
        """The run's id (started now on rank 0 if not yet), for the other processes of the run."""
        return {"id": self.version}

    def load_run_state(self, state: dict[str, Any]) -> None:
        """Go on in rank 0's run."""
        if state.get("id") is not None:
            self._wandb_init["id"] = state["id"]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._experiment is not None:  # a copy in another process resumes the same run
            state["_wandb_init"] = {**self._wandb_init, "id": self._experiment.id}
        state["_experiment"] = None
        return self._without_kept_callbacks(state)

    def _start_run(self) -> Any:
        import wandb

        if wandb.run is not None:
            warnings.warn("There is a wandb run already in progress and newly created instances of `WandbLogger` "
                          "will reuse this run. If this is not desired, call `wandb.finish()` before instantiating "
                          "`WandbLogger`.", stacklevel=3)
            return wandb.run
        if self._wandb_init.get("dir"):
            os.makedirs(self._wandb_init["dir"], exist_ok=True)
        run = wandb.init(**self._wandb_init)
        if self._wandb_init.get("sync_tensorboard"):
            run.define_metric("*", step_metric="global_step")
        else:
            run.define_metric(_STEP_KEY)
            run.define_metric("*", step_metric=_STEP_KEY, step_sync=True)
        return run

    def _log_media(self, key: str, kind: str, argument: str, items: list[Any], step: int | None,
                   per_item: dict[str, list[Any]]) -> None:
        import wandb

        if not isinstance(items, list):
            raise TypeError(f'Expected a list as "{argument}", found {type(items)}')
        for name, values in per_item.items():
            if len(values) != len(items):
                raise ValueError(f"Expected {len(items)} items but only found {len(values)} for {name}")
        make = getattr(wandb, kind)
        media = [make(item, **{name: values[index] for name, values in per_item.items()})
                 for index, item in enumerate(items)]
        self.log_metrics({key: media}, step)

    def _upload_file(self, checkpoint_callback: Any, path: str, score: Any) -> None:
        """The checkpoint as a "model" artifact of the run, with its metadata and aliases."""
        import wandb

        run = self.experiment
        settings_key = type(checkpoint_callback).__name__
        metadata = checkpoint_metadata(checkpoint_callback, path, score, settings_key=settings_key)
        artifact = wandb.Artifact(name=self._checkpoint_name or f"model-{run.id}", type="model", metadata=metadata)
        artifact.add_file(path, name="model.ckpt", policy=self.add_file_policy)
        run.log_artifact(artifact, aliases=aliases_of(checkpoint_callback, path))


def _named(value: Any) -> Any:
    """A function or class as its name (a config holds values, not code); a factory's product is not made."""
    if callable(value) and hasattr(value, "__name__"):
        return value.__name__
    return value


def _json_ready(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str, list, dict)):
        return value
    try:
        json.dumps(value)
    except (TypeError, ValueError, OverflowError):
        return str(value)
    return value
