"""``Trainer``: its arguments, and ``fit`` / ``validate`` / ``test`` / ``predict``, each run as one ``Run``
(``run.py``; what a run does in this process is in ``lifecycle.py``, on ranks it starts in ``launched_ranks.py``)."""

import contextlib
import copy
import os
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from framework.callbacks.base import Callback
from framework.datamodule import DataModule
from framework.errors import MisconfigurationError
from framework.loggers.base import Logger
from framework.module import Module
from framework.precision import Precision
from framework.profilers import Profiler, resolve_profiler
from framework.runtime import Runtime
from framework.runtime.plugins import Plugin
from framework.strategies import Strategy
from framework.trainer import arguments as check
from framework.trainer.arguments import Loaders, datamodule_or_loaders, model_to_run
from framework.trainer.checkpoint_contents import save_checkpoint
from framework.trainer.checkpoint_paths import evaluation_ckpt_path
from framework.trainer.compiled import unwrap_compiled
from framework.trainer.defaults import resolve_loggers, with_default_callbacks
from framework.trainer.launched_ranks import take_trained_module, trains_a_copy
from framework.trainer.lifecycle import run_here, run_on_started_ranks
from framework.trainer.metrics import MetricStore
from framework.trainer.properties import TrainerProperties
from framework.trainer.report import print_results
from framework.trainer.results import Results
from framework.trainer.run import Run
from framework.trainer.run_context import RunContext
from framework.trainer.settings import apply_torch_flags, build_settings
from framework.trainer.state import TrainerFn, TrainerState


class Trainer(TrainerProperties):
    """Runs a ``Module``'s fit, validate, test and predict loops; arguments as in Lightning.

    Two arguments are this framework's own: ``compile`` (compile each step whole: guide "Compile and speed") and
    ``auto_resume`` (a ``fit`` without ``ckpt_path`` resumes from the newest complete checkpoint when its job was
    started again after a lost rank or a preemption: guide "Clusters and restarts"). One default differs from
    Lightning's: ``devices="auto"`` is one process unless a launcher started several.

    Every argument is keyword-only. One left out takes its value from the environment where
    ``FRAMEWORK_TRAINER_<NAME>`` (or Lightning's ``PL_TRAINER_<NAME>``) is set, e.g. ``PL_TRAINER_MAX_EPOCHS=3``.

    Example::

        trainer = Trainer(max_epochs=5, accelerator="cpu", log_every_n_steps=10)
        trainer.fit(model, train_loader, val_loader)
        trainer.test(model, test_loader)

    :param accelerator: ``"cpu"``, ``"cuda"`` (or ``"gpu"``), ``"mps"``; ``"auto"`` (the default): CUDA, else MPS,
        else the CPU.
    :param strategy: a name (``"ddp"``, ``"ddp_spawn"``, ``"fsdp"``, ``"zero2"``, ``"model_parallel"`` ...) or a
        ``Strategy``; ``"auto"`` (the default): DDP where there are several processes, else one device.
    :param devices: devices (on the CPU: processes) per node: an int, ``-1`` for all, a list of indices or a
        string such as ``"0,1"``; ``"auto"`` (the default): one, or as many as a launcher started on this node.
    :param num_nodes: the number of machines (default 1); the run has ``devices`` times ``num_nodes`` processes,
        started by a launcher on each machine (``framework launch``, torchrun, SLURM).
    :param precision: ``"32-true"`` (what ``None``, the default, means), ``"16-mixed"``, ``"bf16-mixed"``,
        ``"16-true"``, ``"bf16-true"``, ``"64-true"``, the short spellings (``16``, ``"bf16"`` ...) or a ``Precision``.
    :param logger: ``None`` or ``True`` (the default): a TensorBoardLogger in ``default_root_dir`` where tensorboard
        is installed, else a CSVLogger; ``False``: none; a ``framework.loggers.Logger`` (an object of your own
        needs the members Logger defines, not only ``log_metrics``), or a list.
    :param callbacks: a ``Callback`` or a list of them; the flags below add their own unless one of the kind is here.
    :param fast_dev_run: ``True`` (1) or an int n: n batches of training and of each evaluation, one epoch, no
        sanity check, no checkpoint or log written; ``False`` (the default): off.
    :param max_epochs: stop after this many epochs; ``None`` (the default) means 1000 unless ``max_steps``,
        ``max_time`` or a ``Timer`` bounds the run, ``-1`` never stops by epochs.
    :param min_epochs: a stop asked for earlier (``trainer.should_stop``, EarlyStopping) waits until this many
        epochs have run; ``None`` (the default): no minimum.
    :param max_steps: stop after this many optimizer steps; ``-1`` (the default): no step limit.
    :param min_steps: as ``min_epochs``, in optimizer steps; ``None`` (the default): no minimum.
    :param max_time: stop once this much training time has passed (a ``Timer`` measures it): ``"DD:HH:MM:SS"``,
        a ``timedelta``, a dict such as ``{"hours": 1}`` or seconds; ``None`` (the default): no limit.
    :param limit_train_batches: batches per training epoch: an int count or a float fraction of the loader;
        ``None`` (the default) means all (``1.0``).
    :param limit_val_batches: the same for each validation loader; ``0`` turns validation off.
    :param limit_test_batches: the same for each test loader.
    :param limit_predict_batches: the same for each predict loader.
    :param overfit_batches: train on the same first batches (an int count or a fraction) every epoch,
        unshuffled, each validation loader limited to it too; ``0.0`` (the default): off.
    :param val_check_interval: validate every this many training batches (an int) or this fraction of an epoch
        (a float); ``None`` (the default) means at each epoch's end.
    :param check_val_every_n_epoch: validate in every n-th epoch only (default 1); ``None`` counts an int
        ``val_check_interval`` across epochs.
    :param num_sanity_val_steps: validation batches per loader run before a fit's first step, to fail early;
        ``None`` (the default) means 2, ``-1`` all, ``0`` none.
    :param log_every_n_steps: send step-level values to the loggers every this many optimizer steps; ``None``
        (the default) means 50, ``0`` never.
    :param enable_checkpointing: add a ``ModelCheckpoint`` unless ``callbacks`` holds a checkpoint callback;
        ``None`` (the default) means ``True``; ``False`` with a checkpoint callback is an error.
    :param enable_progress_bar: add a ``TQDMProgressBar`` unless ``callbacks`` holds a progress bar; ``None``
        (the default) means ``True``.
    :param enable_model_summary: add a ``ModelSummary`` unless ``callbacks`` holds one; ``None`` (the default)
        means ``True``.
    :param accumulate_grad_batches: step the optimizers every this many batches (and on an epoch's last),
        each loss divided by it; default 1. Automatic optimization only.
    :param gradient_clip_val: clip the gradients before each optimizer step at this value; ``None`` (the
        default) or ``0``: no clipping. Automatic optimization only.
    :param gradient_clip_algorithm: ``"norm"`` (the total norm; what ``None``, the default, means) or ``"value"``
        (each gradient clamped).
    :param deterministic: ``True``: torch uses deterministic algorithms only (``"warn"``: warns instead of
        raising where there is none; ``False``: turns that off); ``None`` (the default) leaves torch's setting.
    :param benchmark: set ``torch.backends.cudnn.benchmark`` (where cuDNN is available); ``None`` (the default)
        leaves it.
    :param inference_mode: ``True`` (the default): ``validate``, ``test`` and ``predict`` run under
        ``torch.inference_mode`` where the strategy allows it; ``False``, and validation inside ``fit``: ``no_grad``.
    :param use_distributed_sampler: with several processes, each rank runs its share of every loader (default
        ``True``); ``False``: every rank gets the loaders as given (shard them yourself).
    :param profiler: ``"simple"``, ``"advanced"``, ``"pytorch"``, ``"passthrough"`` or a ``Profiler``; ``None``
        (the default): no profiling.
    :param detect_anomaly: run ``fit`` under ``torch.autograd.set_detect_anomaly`` (slow); default ``False``.
    :param barebones: ``True`` turns off checkpointing, logging, the progress bar, the model summary and the
        sanity check, to time the Trainer itself; asking for any of them (or ``fast_dev_run``,
        ``detect_anomaly``) as well is an error. Default ``False``.
    :param plugins: ``None`` (the default), or plugins from ``framework.plugins``: one ``CheckpointIO`` (every
        checkpoint save, load and removal goes through it; ``AsyncCheckpointIO`` writes ModelCheckpoint's in the
        background), one precision plugin (instead of ``precision``), one cluster environment.
    :param sync_batchnorm: convert the model's BatchNorm layers to ``SyncBatchNorm`` where there are several
        processes; default ``False``.
    :param reload_dataloaders_every_n_epochs: ask for the training and validation loaders again every n epochs;
        ``0`` (the default): once per fit.
    :param default_root_dir: where the default logger, checkpoints (without a logger) and preemption
        checkpoints go; ``None`` (the default): the working directory the Trainer was made in.
    :param enable_autolog_hparams: send the hyperparameters that ``save_hyperparameters`` stored (Module and
        DataModule) to the loggers when a run starts; default ``True``.
    :param compile: ``True`` runs the Module's ``forward`` and step methods under ``torch.compile``; a dict gives
        ``torch.compile``'s keyword arguments (``{"mode": "max-autotune"}``); ``False`` (the default): eager.
    :param auto_resume: ``True`` (the default): resume by itself as described above; ``False``: never.
    :raises MisconfigurationError: where an argument (or its environment variable) is none of the values accepted
        above, or two of them disagree (``barebones`` beside a feature it turns off, ``min_steps`` over
        ``max_steps`` ...), or the accelerator or devices asked for are not on this machine.
    """

    @check.with_environment_defaults
    def __init__(
        self,
        *,
        accelerator: str = "auto",
        strategy: str | Strategy = "auto",
        devices: int | str | list[int] = "auto",
        num_nodes: int = 1,
        precision: str | int | Precision | None = None,
        logger: Logger | Iterable[Logger] | bool | None = None,
        callbacks: Callback | list[Callback] | None = None,
        fast_dev_run: int | bool = False,
        max_epochs: int | None = None,
        min_epochs: int | None = None,
        max_steps: int = -1,
        min_steps: int | None = None,
        max_time: str | timedelta | dict | None = None,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        overfit_batches: int | float = 0.0,
        val_check_interval: int | float | None = None,
        check_val_every_n_epoch: int | None = 1,
        num_sanity_val_steps: int | None = None,
        log_every_n_steps: int | None = None,
        enable_checkpointing: bool | None = None,
        enable_progress_bar: bool | None = None,
        enable_model_summary: bool | None = None,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: int | float | None = None,
        gradient_clip_algorithm: str | None = None,
        deterministic: bool | str | None = None,
        benchmark: bool | None = None,
        inference_mode: bool = True,
        use_distributed_sampler: bool = True,
        profiler: str | Profiler | None = None,
        detect_anomaly: bool = False,
        barebones: bool = False,
        plugins: Plugin | list[Plugin] | None = None,
        sync_batchnorm: bool = False,
        reload_dataloaders_every_n_epochs: int = 0,
        default_root_dir: str | os.PathLike | None = None,
        enable_autolog_hparams: bool = True,
        compile: bool | dict[str, Any] = False,
        auto_resume: bool = True,
    ) -> None:
        given = dict(locals())  # every argument by name, for the one builder of the settings
        del given["self"]
        self.runtime = Runtime(accelerator=accelerator, strategy=strategy, devices=devices, num_nodes=num_nodes,
                               precision=precision, plugins=plugins, compile=compile)
        self._settings = build_settings(given, announce=self.runtime.global_rank == 0)
        self._current_run: Run | None = None  # the Run of the call under way, else the last one
        self.profiler = resolve_profiler(profiler)
        self._callbacks: list[Callback] = with_default_callbacks(
            check.check_list_of("callbacks", callbacks, Callback, "Callback"), self.enable_checkpointing,
            self.enable_progress_bar, self.enable_model_summary, self.max_time,
        )
        self.loggers: list[Logger] = resolve_loggers(logger, self._settings)
        apply_torch_flags(self._settings)
        self.state = TrainerState()
        distributed = self.runtime.world_size > 1
        self.metrics = MetricStore(self.loggers, self.runtime.strategy.all_reduce,
                                   self.runtime.strategy.all_gather_object if distributed else None)
        self.train_results = Results(training=True, distributed=distributed)
        if distributed:  # evaluation's results get it per batch: the ranks may run different batch counts
            self.train_results.step_sync = self.runtime.strategy.all_reduce
        self.module: Module | None = None
        self.datamodule: DataModule | None = None
        self.run_context = RunContext()  # what the runs share: the set-up model, optimizers, loaders ...

    # -- entry points ---
    def fit(self, model: Module, train_dataloaders: Iterable | DataModule | None = None,
            val_dataloaders: Iterable | list[Iterable] | None = None,
            datamodule: DataModule | None = None, ckpt_path: str | os.PathLike | None = None,
            weights_only: bool | None = None) -> None:
        """Train ``model``; validation runs when due if there is validation data and a ``validation_step``.

        ``ckpt_path`` ("last", "best" or a path) resumes from a checkpoint. Checkpoints load with
        ``torch.load(weights_only=True)``; ``weights_only=False`` also unpickles arbitrary objects
        (only for files you trust).

        ``model`` may be what ``torch.compile(model, ...)`` returned, as in Lightning (so may the
        ``model`` of validate, test and predict): the Module inside is the one trained, and its
        step methods run compiled with the options given to ``torch.compile``.

        :param model: the ``Module`` to train (or ``torch.compile`` of one).
        :param train_dataloaders: a DataLoader (or any iterable of batches), or a ``DataModule``; ``None``: the
            ``datamodule``'s or the Module's ``train_dataloader``.
        :param val_dataloaders: a loader or a list of them; ``None``: the ``datamodule``'s or the Module's
            ``val_dataloader``, if any.
        :param datamodule: a ``DataModule`` providing the loaders, instead of passing them.
        :param ckpt_path: ``"last"``, ``"best"``, ``"hpc"`` (the newest preemption checkpoint) or a path to
            resume from; ``None`` (the default): start afresh, unless ``auto_resume`` finds a checkpoint.
        :param weights_only: ``None`` or ``True`` load tensors and plain data only; ``False`` unpickles anything.
        :raises TypeError: where ``model`` is not a ``Module`` (nor ``torch.compile`` of one), or ``datamodule`` is not
            a ``DataModule``.
        :raises MisconfigurationError: where loaders and a ``datamodule`` are both given.
        """
        datamodule, train_dataloaders = datamodule_or_loaders("fit", datamodule, train_dataloaders, val_dataloaders)
        self._run(TrainerFn.FITTING, model, datamodule, {"train": train_dataloaders, "val": val_dataloaders},
                  ckpt_path, weights_only)

    def validate(self, model: Module | None = None, dataloaders: Loaders = None, ckpt_path: str | None = None,
                 verbose: bool = True, datamodule: DataModule | None = None,
                 weights_only: bool | None = None) -> list[dict[str, float]]:
        """Run one validation epoch; returns one dict of metrics per dataloader.

        :param model: the ``Module``; ``None``: the last run's.
        :param dataloaders: a loader, a list of them, or a ``DataModule``; ``None``: ``val_dataloader``.
        :param ckpt_path: ``"best"``, ``"last"``, ``"hpc"`` or a path to load first; ``None``: the current weights,
            or without ``model`` the last fit's best checkpoint where there is one.
        :param verbose: print the results on global rank 0 (default ``True``).
        :param datamodule: a ``DataModule`` providing the loaders.
        :param weights_only: as in ``fit``.
        :raises TypeError: as in ``fit``; and without ``model``, where no run came before.
        :raises MisconfigurationError: where ``dataloaders`` and a ``datamodule`` are both given.
        """
        return self._evaluate(TrainerFn.VALIDATING, model, dataloaders, ckpt_path, verbose, datamodule, weights_only)

    def test(self, model: Module | None = None, dataloaders: Loaders = None, ckpt_path: str | None = None,
             verbose: bool = True, datamodule: DataModule | None = None,
             weights_only: bool | None = None) -> list[dict[str, float]]:
        """Run one test epoch; returns one dict of metrics per dataloader.

        :param model: as in ``validate``.
        :param dataloaders: a loader, a list of them, or a ``DataModule``; ``None``: ``test_dataloader``.
        :param ckpt_path: as in ``validate``.
        :param verbose: print the results on global rank 0 (default ``True``).
        :param datamodule: a ``DataModule`` providing the loaders.
        :param weights_only: as in ``fit``.
        :raises TypeError: as in ``fit``; and without ``model``, where no run came before.
        :raises MisconfigurationError: where ``dataloaders`` and a ``datamodule`` are both given.
        """
        return self._evaluate(TrainerFn.TESTING, model, dataloaders, ckpt_path, verbose, datamodule, weights_only)

    def predict(self, model: Module | None = None, dataloaders: Loaders = None, datamodule: DataModule | None = None,
                return_predictions: bool | None = None, ckpt_path: str | None = None,
                weights_only: bool | None = None) -> list[Any] | None:
        """Run ``predict_step`` over the data; returns the predictions, moved to the CPU, in order (a list
        per loader if several), or None with ``return_predictions=False`` (nothing is kept then).

        With ranks the Trainer started itself, each rank predicts a contiguous part of the data and
        the caller gets every rank's predictions joined in dataset order (a DistributedSampler of
        your own keeps its own order; its parts are joined rank by rank); where it ran the script
        again for them, every rank gets them all. Where a launcher started the ranks (torchrun,
        SLURM), each rank returns its own part, as in Lightning.

        :param model: as in ``validate``.
        :param dataloaders: a loader, a list of them, or a ``DataModule``; ``None``: ``predict_dataloader``.
        :param datamodule: a ``DataModule`` providing the loaders.
        :param return_predictions: ``False`` keeps nothing and returns ``None``; ``None`` (the default): return them.
        :param ckpt_path: as in ``validate``.
        :param weights_only: as in ``fit``.
        :raises TypeError: as in ``fit``; and without ``model``, where no run came before.
        :raises MisconfigurationError: where ``dataloaders`` and a ``datamodule`` are both given.
        """
        datamodule, dataloaders = datamodule_or_loaders("predict", datamodule, dataloaders)
        return self._run(TrainerFn.PREDICTING, model, datamodule, {"predict": dataloaders}, ckpt_path, weights_only,
                         keep_predictions=return_predictions is not False)

    def _evaluate(self, fn: TrainerFn, model: Module | None, dataloaders: Any, ckpt_path: str | None,
                  verbose: bool, datamodule: DataModule | None, weights_only: bool | None) -> list[dict[str, float]]:
        datamodule, dataloaders = datamodule_or_loaders(fn.value, datamodule, dataloaders)
        stage = "val" if fn == TrainerFn.VALIDATING else "test"
        results = self._run(fn, model, datamodule, {stage: dataloaders}, ckpt_path, weights_only)
        if verbose and self.is_global_zero:
            print_results("Validate" if stage == "val" else "Test", results)
        return results

    # -- one run ---
    def _run(self, fn: TrainerFn, model: Module | None, datamodule: DataModule | None, loaders: dict[str, Any],
             ckpt_path: Any, weights_only: bool | None, keep_predictions: bool = True) -> Any:
        given = model  # a torch.compile'd Module reaches the ranks as it is, for them to compile with its options
        if model is not None:
            model, self.run_context.given_compiler = unwrap_compiled(fn.value, model)
        run = self._new_run(fn, self._attach(fn, model, datamodule), loaders, weights_only=weights_only,
                            keep_predictions=keep_predictions, model_given=model is not None)
        if fn != TrainerFn.FITTING:  # here, once, not on each rank the Trainer may start
            ckpt_path = evaluation_ckpt_path(run, fn, ckpt_path)
        if self.runtime.needs_launch:
            if self.runtime.start_method() != "popen":
                return run_on_started_ranks(run, self._run_on_this_rank, run.fn, given, run.datamodule,
                                            loaders, ckpt_path, run.weights_only, run.keep_predictions)
            self.runtime.become_rank_zero()  # the other ranks run the script again; this one goes on as rank 0
        if not trains_a_copy(run):
            return run_here(run, ckpt_path)
        trained = self._new_run(fn, self._attach(fn, copy.deepcopy(run.module), datamodule), loaders,
                                weights_only=weights_only, keep_predictions=keep_predictions, model_given=True)
        outcome = run_here(trained, ckpt_path)
        self.module = run.module  # given the whole trained weights, as the caller of forked ranks gets them
        take_trained_module(run, self.runtime.strategy.full_module_state_dict(trained.model))
        return outcome

    def _new_run(self, fn: TrainerFn, module: Module, loaders: dict[str, Any], **options: Any) -> Run:
        """The Run of this call: the settings, the callbacks and loggers as they are now, and what runs share."""
        self.run_context.given_loaders = loaders
        self._current_run = Run(
            fn=fn, settings=self.settings, runtime=self.runtime, state=self.state, metrics=self.metrics,
            train_results=self.train_results, context=self.run_context, callbacks=self.callbacks,
            loggers=self.loggers, module=module, datamodule=self.datamodule, trainer=self, profiler=self.profiler,
            **options)
        return self._current_run

    def _run_on_this_rank(self, *arguments: Any) -> tuple[Run, Any]:
        """What each rank the Trainer starts runs: the entry point, as an attached rank does."""
        outcome = self._run(*arguments)
        return self._current_run, outcome

    def _attach(self, fn: TrainerFn, model: Module | None, datamodule: DataModule | None) -> Module:
        """Make ``model`` (else the last run's Module) and ``datamodule`` this Trainer's; a new Module drops the
        optimizers and set-up model of the last."""
        model = model_to_run(fn.value, model, self.module, datamodule)
        if model is not self.module:
            context = self.run_context
            context.module_setup = False
            context.optimizers, context.lr_scheduler_configs, context.manual_optimizers = [], [], []
        self.module, self.datamodule = model, datamodule
        model.trainer = self
        if datamodule is not None:
            datamodule.trainer = self
        return model

    # -- services the Module calls ---
    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on each node's first process only."""
        if self.local_rank == 0:
            print(*args, **kwargs)

    def init_module(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager:
        """Create the model inside this block to build it on the device, in the precision's parameter dtype.

        Example::

            trainer = Trainer(precision="bf16-true")
            with trainer.init_module():
                model = MyModule()            # parameters created in bf16 on the device

        :param empty_init: ``True``: under FSDP, parameters are made on the meta device and allocated once
            sharded; otherwise (and with ``None``, the default) on the device.
        """
        return self.runtime.init_module(empty_init)

    # -- checkpoints ---
    def save_checkpoint(self, filepath: str | os.PathLike, weights_only: bool | None = None,
                        storage_options: dict[str, Any] | None = None) -> None:
        """Write a checkpoint of the current run to ``filepath`` (any fsspec path).

        :param filepath: the file to write (a local path or an fsspec URL).
        :param weights_only: ``True`` leaves out the optimizer, scheduler, precision, callback and DataModule
            states (the file then cannot resume a fit); ``None`` or ``False`` (the default): everything.
        :param storage_options: keyword arguments for the fsspec filesystem (credentials for ``s3://`` ...).
        :raises MisconfigurationError: where no fit, validate, test or predict has run yet.
        """
        if self.model is None or self._current_run is None:
            raise MisconfigurationError("save_checkpoint needs a model: call fit, validate, test or predict first.")
        save_checkpoint(self._current_run, os.fspath(filepath), weights_only, storage_options)
