"""``MLFlowLogger``: metrics, hyperparameters and checkpoints in an MLflow run (``pip install "framework[mlflow]"``)."""

import dataclasses
import json
import os
import re
import tempfile
import time
import warnings
from argparse import Namespace
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlparse

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

_STATUS = {"success": "FINISHED", "finished": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
_PARAMS_PER_CALL = 100  # MLflow's limits on one log_batch
_METRICS_PER_CALL = 1000
_UNACCEPTED_IN_NAMES = re.compile(r"[^a-zA-Z0-9_/. -]+")


class MLFlowLogger(CheckpointUploading, Logger):
    """Logs to an MLflow run: a local store in ``save_dir`` by default (``./mlruns``), or the server at
    ``tracking_uri`` (else ``$MLFLOW_TRACKING_URI``).

    The run is made in experiment ``experiment_name`` on first use, on global rank 0 (other ranks get a no-op
    experiment); ``run_id`` goes on an existing run instead. ``name`` is the experiment's id and ``version`` the
    run's, so checkpoints go to ``<save_dir>/<experiment id>/<run id>/checkpoints`` by default, as in Lightning.
    With ``log_model=True`` the best and last checkpoints become artifacts when training ends, with ``"all"``
    each checkpoint when it is saved. ``logger.experiment`` is the ``mlflow.MlflowClient``.

    MLflow 3 keeps a local file store only on request: for a ``file:`` URI this logger makes that request
    (``MLFLOW_ALLOW_FILE_STORE=true``, unless the environment says otherwise).

    :param experiment_name: the MLflow experiment the run goes in, made when missing (default ``"lightning_logs"``).
    :param run_name: the run's name (its ``mlflow.runName`` tag); ``None`` (default): MLflow's choice.
    :param tracking_uri: the tracking server or store; ``None`` (default): ``$MLFLOW_TRACKING_URI``, else
        ``file:<save_dir>``.
    :param tags: tags set on the run when it is made (default ``None``: none).
    :param save_dir: the local store's folder, used without a tracking URI (default ``"./mlruns"``; ``None`` then
        raises).
    :param log_model: False (default): no checkpoints; True: the checkpoint callback's best, last and top-k files
        when training ends (at once when it keeps every file); ``"all"``: each checkpoint when it is saved.
    :param prefix: put before each metric's name, joined with ``-`` (default ``""``: none).
    :param artifact_location: where the artifacts of an experiment made here are stored; ``None`` (default):
        MLflow's default.
    :param run_id: an existing run to log to (its experiment is used); ``None`` (default): a new run.
    :param synchronous: passed to MLflow's ``log_batch`` (False: without waiting); ``None`` (default): MLflow's
        default.
    :raises MisconfigurationError: where mlflow is not installed (a ``MissingPackageError``), ``log_model`` is none
        of False, True and "all", or ``save_dir`` is ``None`` without a ``tracking_uri`` (nor ``MLFLOW_TRACKING_URI``).

    Example::

        logger = MLFlowLogger(experiment_name="digits", tracking_uri="http://mlflow.internal:5000")
        Trainer(logger=logger).fit(model)
        logger.experiment.log_artifact(logger.run_id, "confusion.png")
    """

    #: Between the ``prefix`` and a metric's name.
    LOGGER_JOIN_CHAR = "-"

    def __init__(self, experiment_name: str = "lightning_logs", run_name: str | None = None,
                 tracking_uri: str | None = None, tags: dict[str, Any] | None = None,
                 save_dir: str | os.PathLike | None = "./mlruns", log_model: Literal[True, False, "all"] = False,
                 prefix: str = "", artifact_location: str | None = None, run_id: str | None = None,
                 synchronous: bool | None = None) -> None:
        require_package("mlflow", "MLFlowLogger", extra="mlflow")
        check_log_model("MLFlowLogger", log_model)
        tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if not tracking_uri:
            if save_dir is None:
                raise MisconfigurationError("MLFlowLogger(save_dir=None) needs a tracking_uri (or "
                                            "$MLFLOW_TRACKING_URI): where else would the run go?")
            tracking_uri = f"file:{os.fspath(save_dir)}"
        self._experiment_name = experiment_name
        self._run_name = run_name
        self._tracking_uri = tracking_uri
        self.tags = tags
        self._start_uploads(log_model)
        self._prefix = prefix
        self._artifact_location = artifact_location
        self._batch_options = {} if synchronous is None else {"synchronous": synchronous}
        self._experiment_id: str | None = None
        self._run_id = run_id
        self._client: Any = None

    @property
    def experiment(self) -> Any:
        """The ``mlflow.MlflowClient`` of the tracking store (a no-op object on ranks other than 0); the run is made
        on first use."""
        if rank_zero_only.rank != 0:
            return NoOpExperiment()
        if self._client is None:
            self._client = self._connect()
        return self._client

    @property
    def run_id(self) -> str | None:
        """The MLflow run's id."""
        _ = self.experiment
        return self._run_id

    @property
    def experiment_id(self) -> str | None:
        """The MLflow experiment's id."""
        _ = self.experiment
        return self._experiment_id

    @property
    def name(self) -> str | None:
        """The experiment's id (the folder of its runs in a local store), as Lightning names it."""
        return self.experiment_id

    @property
    def version(self) -> str | None:
        """The run's id."""
        return self.run_id

    @property
    def save_dir(self) -> str | None:
        """The local store's folder for a ``file:`` tracking URI, else None."""
        if not self._tracking_uri.startswith("file:"):
            return None
        path = self._tracking_uri[len("file:"):]
        return urlparse(self._tracking_uri).path if path.startswith("//") else path

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None = None) -> None:
        """Hyperparameters as run parameters: nested names joined with ``/``, values as strings cut to MLflow's
        length limit."""
        if rank_zero_only.rank != 0:
            return
        from mlflow.entities import Param

        limit = _param_value_limit()
        flat = _flatten(as_dict(params))
        rows = [Param(key=key, value=str(value)[:limit]) for key, value in flat.items()]
        for start in range(0, len(rows), _PARAMS_PER_CALL):
            self.experiment.log_batch(run_id=self.run_id, params=rows[start:start + _PARAMS_PER_CALL],
                                      **self._batch_options)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Metrics at ``step`` (0 when None); names MLflow refuses lose their other characters, with a warning,
        and string values are left out, with a warning."""
        if rank_zero_only.rank != 0:
            return
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        rows = []
        for key, value in with_prefix(metrics, self._prefix, self.LOGGER_JOIN_CHAR).items():
            if isinstance(value, str):
                warnings.warn(f"MLFlowLogger: discarding metric with string value {key}={value}.", stacklevel=2)
                continue
            accepted = _UNACCEPTED_IN_NAMES.sub("", key)
            if accepted != key:
                warnings.warn(f"MLflow only allows '_', '/', '.', '-' and ' ' special characters in metric names. "
                              f"Replacing {key} with {accepted}.", RuntimeWarning, stacklevel=2)
            rows.append(Metric(key=accepted, value=float(value), timestamp=timestamp, step=step or 0))
        for start in range(0, len(rows), _METRICS_PER_CALL):
            self.experiment.log_batch(run_id=self.run_id, metrics=rows[start:start + _METRICS_PER_CALL],
                                      **self._batch_options)

    @rank_zero_only
    def log_restart(self, record: dict[str, Any]) -> None:
        """The record as the run's tag ``framework.restart.<n>``."""
        self.experiment.set_tag(self.run_id, f"framework.restart.{record['restart']}", json.dumps(record))

    def finalize(self, status: str) -> None:
        """Upload the checkpoints kept for the end and mark the run ended (``success`` → FINISHED, ``failed`` →
        FAILED, ``interrupted`` → KILLED)."""
        if rank_zero_only.rank != 0 or self._client is None:
            return
        self._upload_kept()
        self._client.set_terminated(self._run_id, _STATUS.get(status, status))

    def run_state(self) -> dict[str, Any]:
        """The experiment and run (made now on rank 0 if not yet), for the other processes of the run."""
        if rank_zero_only.rank != 0:
            return {"experiment_id": self._experiment_id, "run_id": self._run_id}
        return {"experiment_id": self.experiment_id, "run_id": self.run_id}

    def load_run_state(self, state: dict[str, Any]) -> None:
        """Go on in rank 0's run."""
        if state.get("run_id") is not None:
            self._experiment_id, self._run_id = state["experiment_id"], state["run_id"]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None  # a copy in another process connects again, to the same run
        return self._without_kept_callbacks(state)

    def _connect(self) -> Any:
        import mlflow
        from mlflow.tracking.context.registry import resolve_tags

        if self._tracking_uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        mlflow.set_tracking_uri(self._tracking_uri)
        client = mlflow.MlflowClient(self._tracking_uri)
        if self._run_id is not None:
            self._experiment_id = client.get_run(self._run_id).info.experiment_id
            return client
        found = client.get_experiment_by_name(self._experiment_name)
        if found is not None and found.lifecycle_stage != "deleted":
            self._experiment_id = found.experiment_id
        else:
            self._experiment_id = client.create_experiment(self._experiment_name,
                                                           artifact_location=self._artifact_location)
        tags = dict(self.tags or {})
        if self._run_name is not None:
            if "mlflow.runName" in tags and tags["mlflow.runName"] != self._run_name:
                warnings.warn(f"MLFlowLogger: the tag mlflow.runName is replaced by run_name={self._run_name!r}.",
                              stacklevel=3)
            tags["mlflow.runName"] = self._run_name
        self._run_id = client.create_run(self._experiment_id, tags=resolve_tags(tags)).info.run_id
        return client

    def _upload_file(self, checkpoint_callback: Any, path: str, score: Any) -> None:
        """The checkpoint, with its metadata and aliases beside it, as artifacts in a folder named after it."""
        import yaml

        folder = os.path.splitext(os.path.basename(path))[0]
        self.experiment.log_artifact(self.run_id, path, folder)
        with tempfile.TemporaryDirectory() as beside:
            metadata = checkpoint_metadata(checkpoint_callback, path, score, settings_key="Checkpoint")
            with open(os.path.join(beside, "metadata.yaml"), "w") as file:
                yaml.safe_dump(metadata, file, default_flow_style=False)
            with open(os.path.join(beside, "aliases.txt"), "w") as file:
                file.write(str(aliases_of(checkpoint_callback, path)))
            self.experiment.log_artifacts(self.run_id, beside, folder)


def _flatten(params: Mapping[str, Any], parent: str = "") -> dict[str, Any]:
    """Nested dicts (and dataclasses, Namespaces, lists of dicts) as ``{"outer/inner": value}``."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{parent}/{key}" if parent else str(key)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        elif isinstance(value, Namespace):
            value = vars(value)
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name))
        elif isinstance(value, (list, tuple)) and value and all(isinstance(item, Mapping) for item in value):
            flat.update(_flatten({str(index): item for index, item in enumerate(value)}, name))
        else:
            flat[name] = value
    return flat


def _param_value_limit() -> int:
    try:
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH
    except ImportError:  # an MLflow without the constant: its oldest limit
        return 250
    return int(MAX_PARAM_VAL_LENGTH)
