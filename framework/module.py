"""``Module``: the user's model, its step functions and its hooks."""

import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer

from framework import export
from framework.errors import MisconfigurationError, describe, unloggable_value
from framework.hparams import HyperparametersMixin, build_from_hparams, read_hparams_file
from framework.loader_hooks import LoaderHooks
from framework.module_hook_defaults import ModuleHooks
from framework.module_optimization import OptimizationMethods
from framework.protocols import TrainerLike


class Module(ModuleHooks, LoaderHooks, HyperparametersMixin, OptimizationMethods, nn.Module):
    """A ``torch.nn.Module`` that also says how to train, validate, test and predict.

    Example::

        class Regressor(framework.Module):
            def __init__(self, lr=0.1):
                super().__init__()
                self.save_hyperparameters()
                self.net = torch.nn.Linear(4, 1)

            def training_step(self, batch, batch_idx):
                x, y = batch
                loss = torch.nn.functional.mse_loss(self.net(x), y)
                self.log("train_loss", loss)
                return loss

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
    """

    # TorchScript must not compile these (they read the Trainer, or describe the Python object).
    __jit_unused_properties__ = [
        "trainer", "device", "dtype", "on_gpu", "global_step", "current_epoch", "global_rank", "local_rank",
        "logger", "loggers", "hparams", "hparams_initial",
    ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._trainer: TrainerLike | None = None
        self._results: Any = None
        self._logged_while_compiling: list[tuple] = []  # self.log calls inside a compiled step, not yet recorded
        self._logging_refused_in: str | None = None  # the running hook, where it is one that may not log
        self._forget_hyperparameters()
        self._jit_is_scripting = False
        self.automatic_optimization: bool = True
        #: Whether ``load_from_checkpoint`` and resuming require every key of the module in the checkpoint.
        self.strict_loading: bool = True
        self.example_input_array: Any = None
        #: False: ``prepare_data`` runs on global rank 0 only (a filesystem all nodes share), not once per node.
        self.prepare_data_per_node: bool = True

    def __getstate__(self) -> dict[str, Any]:
        """Pickling or deep-copying a module leaves its Trainer behind (a copy holds no loaders or loops)."""
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__
        return {**state, "_trainer": None, "_results": None, "_logged_while_compiling": [], "_logging_refused_in": None}

    # -- what the trainer tells the module ---
    @property
    def trainer(self) -> Any:
        """The Trainer this module is attached to; raises ``RuntimeError`` when there is none."""
        if self._trainer is None and not self._jit_is_scripting:
            raise RuntimeError(
                f"{type(self).__qualname__} is not attached to a Trainer; call trainer.fit(model) first."
            )
        return self._trainer

    @trainer.setter
    def trainer(self, trainer: TrainerLike) -> None:
        """Attach the module to ``trainer`` (each Trainer run does this)."""
        self._trainer = trainer

    @property
    def device(self) -> torch.device:
        """The device of the first parameter (else the first buffer); CPU for a module with neither."""
        for tensor in self.parameters():
            return tensor.device
        for tensor in self.buffers():
            return tensor.device
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the first floating parameter (else buffer); torch's default dtype for a module with neither."""
        for tensor in (*self.parameters(), *self.buffers()):
            if tensor.is_floating_point():
                return tensor.dtype
        return torch.get_default_dtype()

    @property
    def device_mesh(self) -> Any:
        """The ``DeviceMesh`` of ``ModelParallelStrategy`` (dimensions ``"data_parallel"`` and ``"tensor_parallel"``),
        for ``configure_model`` to split layers over; None under other strategies or without a Trainer."""
        if self._trainer is None:
            return None
        strategy = self._trainer.runtime.strategy
        return strategy.device_mesh if hasattr(type(strategy), "device_mesh") else None

    @property
    def on_gpu(self) -> bool:
        """Whether the module's parameters are on a CUDA device."""
        return self.device.type == "cuda"

    @property
    def global_step(self) -> int:
        """``trainer.global_step``; 0 when not attached to a Trainer."""
        return self._trainer.state.global_step if self._trainer is not None else 0

    @property
    def current_epoch(self) -> int:
        """``trainer.current_epoch``; 0 when not attached to a Trainer."""
        return self._trainer.state.current_epoch if self._trainer is not None else 0

    @property
    def global_rank(self) -> int:
        """``trainer.global_rank``; 0 when not attached to a Trainer."""
        return self._trainer.global_rank if self._trainer is not None else 0

    @property
    def local_rank(self) -> int:
        """``trainer.local_rank``; 0 when not attached to a Trainer."""
        return self._trainer.local_rank if self._trainer is not None else 0

    @property
    def logger(self) -> Any:
        """The Trainer's first logger; None when there is none or no Trainer."""
        return self._trainer.logger if self._trainer is not None else None

    @property
    def loggers(self) -> list[Any]:
        """The Trainer's loggers; ``[]`` when not attached to a Trainer."""
        return self._trainer.loggers if self._trainer is not None else []

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank 0 only."""
        if self.global_rank == 0:
            print(*args, **kwargs)

    # -- logging ---
    def log(self, name: str, value: Any, prog_bar: bool = False, logger: bool | None = None,
            on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: str | Callable = "mean",
            enable_graph: bool = False, sync_dist: bool = False, sync_dist_group: Any = None,
            add_dataloader_idx: bool = True, batch_size: int | None = None, metric_attribute: str | None = None,
            rank_zero_only: bool = False) -> None:
        """Record ``value`` under ``name`` for loggers, the progress bar and ``trainer.callback_metrics``.

        Defaults follow Lightning: inside ``training_step`` (and the training batch hooks)
        ``on_step=True, on_epoch=False``; everywhere else ``on_step=False, on_epoch=True``.
        Epoch values are batch-size-weighted means unless ``reduce_fx`` says otherwise
        ("sum", "max", "min" or a callable). ``value`` may be a number, a one-element tensor
        or a torchmetrics ``Metric`` (computed and reset at the epoch's end). Within an epoch,
        logging a name again with other settings raises.

        :param name: a non-empty string; with several evaluation loaders ``/dataloader_idx_N`` is appended.
        :param value: a number, a one-element tensor (detached) or a torchmetrics ``Metric``.
        :param prog_bar: show it on the progress bar; default ``False``.
        :param logger: ``False`` keeps it from the loggers (``callback_metrics`` still get it); ``None`` (the
            default) means ``True``.
        :param on_step: record each batch's value (as ``<name>_step`` where ``on_epoch`` too); ``None``: see above.
        :param on_epoch: record the epoch's reduced value (as ``<name>_epoch`` where ``on_step`` too); ``None``: see
            above.
        :param reduce_fx: how the epoch value is made: ``"mean"`` (the default), ``"sum"``, ``"max"``, ``"min"``,
            or a callable taking the stacked values.
        :param enable_graph: accepted for Lightning's sake; no effect: logged tensors are always detached.
        :param sync_dist: reduce the value over all ranks with ``reduce_fx`` (not a callable one); default ``False``.
        :param sync_dist_group: accepted for Lightning's sake; no effect: ``sync_dist`` reduces over all ranks.
        :param add_dataloader_idx: ``False`` leaves the ``/dataloader_idx_N`` suffix off; default ``True``.
        :param batch_size: this value's weight in the epoch's mean; ``None`` (the default): found in the batch.
        :param metric_attribute: accepted for Lightning's sake; no effect.
        :param rank_zero_only: accepted for Lightning's sake; no effect.
        """
        if on_step is False and on_epoch is False:
            raise MisconfigurationError(f"self.log({name!r}, ..., on_step=False, on_epoch=False) is not useful: "
                                        "nothing would be recorded. Set on_step=True or on_epoch=True.")
        results = self._results
        refused_in = self._logging_refused_in
        if refused_in is not None or (results is None and self._trainer is not None):
            where = f"inside {refused_in}" if refused_in is not None else "outside the Trainer's loops"
            raise MisconfigurationError(
                f"self.log({name!r}, ...) {where}: Lightning refuses logging there, as this framework does. Log in "
                "a step, a batch hook or an epoch hook, or write to the logger yourself (self.logger.experiment)."
            )
        if results is None:  # no Trainer: a step tested on its own, as Lightning allows
            if value is None or isinstance(value, Mapping):  # a mistake with or without a Trainer
                raise unloggable_value(name, value)
            warnings.warn(f"self.log({name!r}, ...) was called outside a Trainer loop; the value is dropped.",
                          stacklevel=2)
            return
        if logger and not self._trainer.loggers:
            warnings.warn(f"You called `self.log({name!r}, ..., logger=True)` but have no logger configured. You can "
                          "enable one by doing `Trainer(logger=ALogger(...))`. Remove `logger=True` to remove this "
                          "warning.", stacklevel=2)
        logged = (name, value, prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist, add_dataloader_idx,
                  batch_size)
        if torch.compiler.is_compiling():
            # Inside a compiled step the call is only noted, and recorded once the step has run
            # (_record_logs_of_compiled_step): traced, recording would read the loop's counters, and
            # torch.compile would compile the step again on every batch.
            self._logged_while_compiling.append(logged)
            return
        results.log(*logged)

    def _record_logs_of_compiled_step(self) -> None:
        """Record the ``self.log`` calls a compiled step made (the Trainer's loops call this after every step, so
        steps compiled by the user are covered too)."""
        logged = self._logged_while_compiling
        if logged:
            self._logged_while_compiling = []
            for name, value, *settings in logged:
                if isinstance(value, torch.Tensor) and value.is_cuda:
                    # A step compiled with CUDA graphs ("reduce-overhead", "max-autotune") writes its outputs
                    # into the same memory on every run: a value kept for the epoch must be a copy.
                    value = value.detach().clone()
                self._results.log(name, value, *settings)

    def log_dict(self, dictionary: Mapping[str, Any], prog_bar: bool = False, logger: bool | None = None,
                 on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: str | Callable = "mean",
                 enable_graph: bool = False, sync_dist: bool = False, sync_dist_group: Any = None,
                 add_dataloader_idx: bool = True, batch_size: int | None = None,
                 rank_zero_only: bool = False) -> None:
        """``self.log`` for every item of ``dictionary`` (a mapping, or a torchmetrics ``MetricCollection``: each
        of its metrics under its name) with the same settings.

        :param dictionary: names mapped to values, or a torchmetrics ``MetricCollection``.
        :param prog_bar: as in ``log``.
        :param logger: as in ``log``.
        :param on_step: as in ``log``.
        :param on_epoch: as in ``log``.
        :param reduce_fx: as in ``log``.
        :param enable_graph: as in ``log`` (no effect).
        :param sync_dist: as in ``log``.
        :param sync_dist_group: as in ``log`` (no effect).
        :param add_dataloader_idx: as in ``log``.
        :param batch_size: as in ``log``.
        :param rank_zero_only: as in ``log`` (no effect).
        """
        items = dictionary.items() if isinstance(dictionary, Mapping) else _collection_items(dictionary)
        if items is None:
            raise MisconfigurationError(
                f"log_dict(dictionary=...) needs a mapping or a torchmetrics MetricCollection; got "
                f"{describe(dictionary)}."
            )
        for name, value in items:
            self.log(name, value, prog_bar=prog_bar, logger=logger, on_step=on_step, on_epoch=on_epoch,
                     reduce_fx=reduce_fx, sync_dist=sync_dist, add_dataloader_idx=add_dataloader_idx,
                     batch_size=batch_size)

    # -- steps ---
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """Needed to fit: the batch's loss, a dict with a ``"loss"`` tensor, or None to skip it (warned once a fit)."""
        raise MisconfigurationError(f"{type(self).__qualname__} must define training_step(batch, batch_idx) to fit.")

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        """Not overriding it turns validation off."""

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        """Compute and ``self.log`` the metrics of one test batch (``dataloader_idx`` follows with several loaders)."""
        raise MisconfigurationError(f"{type(self).__qualname__} must define test_step(batch, batch_idx) to test.")

    def predict_step(self, batch: Any, batch_idx: int = 0, dataloader_idx: int = 0) -> Any:
        """By default ``self(batch)`` (``predict`` refuses a Module with neither ``forward`` nor ``predict_step``).

        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several.
        """
        return self(batch)

    def configure_optimizers(self) -> Any:
        """Return an optimizer, a list of them, ``([optimizers], [schedulers])`` or a dict (see the docs)."""
        return None

    def configure_callbacks(self) -> Any:
        """Callbacks this module needs; they replace Trainer callbacks of the same type."""
        return []

    def configure_model(self) -> None:
        """Create layers here to build them after the strategy is known (e.g. sharded at creation)."""

    def configure_gradient_clipping(self, optimizer: Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Clip before each optimizer step; by default with the Trainer's settings.

        :param optimizer: the optimizer about to step.
        :param gradient_clip_val: the Trainer's ``gradient_clip_val``.
        :param gradient_clip_algorithm: the Trainer's ``gradient_clip_algorithm``.
        """
        self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val,
                            gradient_clip_algorithm=gradient_clip_algorithm)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Optimizer,
                       optimizer_closure: Callable[[], Any] | None = None) -> None:
        """Override to change how the optimizer steps (e.g. a learning-rate warm-up); call ``optimizer.step``.

        :param epoch: the current epoch.
        :param batch_idx: the batch's index in the epoch.
        :param optimizer: the optimizer to step.
        :param optimizer_closure: runs ``training_step`` through backward and clipping; pass it to ``optimizer.step``.
        """
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Optimizer) -> None:
        """Clear ``optimizer``'s gradients: on the first batch of each accumulation window, after its
        ``training_step`` and before its backward, as in Lightning.

        :param epoch: the current epoch.
        :param batch_idx: the batch's index in the epoch.
        :param optimizer: the optimizer whose gradients to clear.
        """
        optimizer.zero_grad()

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Step one LR scheduler; ``metric`` is the monitored value for ReduceLROnPlateau.

        :param scheduler: the scheduler to step.
        :param metric: the monitored value, or ``None`` for schedulers that monitor nothing.
        """
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Compute gradients; override to change how (the Trainer's precision scales it where needed).

        :param loss: the loss (other arguments go on to ``backward``).
        """
        self.trainer.runtime.backward(loss, *args, model=self.trainer.model, **kwargs)

    def all_gather(self, data: Any, group: Any = None, sync_grads: bool = False) -> Any:
        """Gather tensors (in any nesting) from every rank, stacked along a new first dimension.

        :param data: a tensor or number, or lists, tuples and dicts of them.
        :param group: accepted for Lightning's sake; not used: the gather is over all ranks.
        :param sync_grads: accepted for Lightning's sake; not used: no gradient flows through the gather.
        """
        gather = self.trainer.runtime.all_gather
        if isinstance(data, torch.Tensor):
            return gather(data)
        if isinstance(data, Mapping):
            return {key: self.all_gather(value) for key, value in data.items()}
        if isinstance(data, (list, tuple)):
            return type(data)(self.all_gather(value) for value in data)
        return gather(torch.as_tensor(data))

    # -- checkpoints and export ---
    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: str | os.PathLike, map_location: Any = None,
                             hparams_file: str | os.PathLike | None = None, strict: bool | None = None,
                             weights_only: bool | None = None, **overrides: Any) -> "Module":
        """Rebuild the module from a checkpoint: ``cls(**saved hparams, **overrides)``, then its weights.

        ``hparams_file`` (a YAML file) replaces the hyperparameters saved in the checkpoint;
        ``strict=None`` means ``self.strict_loading``; ``weights_only=False`` also unpickles
        arbitrary objects (only for files you trust).

        Example::

            model = Regressor.load_from_checkpoint("epoch=3-step=400.ckpt", lr=0.01)

        :param checkpoint_path: a checkpoint file or sharded-checkpoint folder (a local path or an fsspec URL).
        :param map_location: as ``torch.load``'s, and a device or string moves the model there; ``None`` (the
            default): the CPU.
        :param hparams_file: see above; ``None`` (the default): the checkpoint's hyperparameters.
        :param strict: see above; ``True`` requires every key to match.
        :param weights_only: see above; ``None`` or ``True`` load tensors and plain data only.
        """
        from framework.io.checkpoint_storage import check_trainer_checkpoint, load_checkpoint

        checkpoint = check_trainer_checkpoint(
            load_checkpoint(checkpoint_path, map_location=map_location or "cpu", weights_only=weights_only),
            checkpoint_path)
        saved = read_hparams_file(hparams_file) if hparams_file is not None else checkpoint.get("hyper_parameters", {})
        model = build_from_hparams(cls, saved, overrides, checkpoint.get("hparams_name", "kwargs"))
        model.on_load_checkpoint(checkpoint)
        model.load_state_dict(checkpoint["state_dict"], strict=model.strict_loading if strict is None else strict)
        if map_location is not None and not callable(map_location) and not isinstance(map_location, dict):
            model.to(map_location)
        return model

    def to_torchscript(self, file_path: str | os.PathLike | None = None, method: str = "script",
                       example_inputs: Any = None, **kwargs: Any) -> Any:
        """The module as TorchScript ("script", or "trace" with ``example_inputs``), saved to ``file_path`` if given.

        :param file_path: where to save it too; ``None`` (the default): not saved.
        :param method: ``"script"`` (the default, ``torch.jit.script``) or ``"trace"`` (``torch.jit.trace``).
        :param example_inputs: what tracing calls the module with; ``None``: ``example_input_array``.
        """
        return export.to_torchscript(self, file_path, method, example_inputs, **kwargs)

    def to_onnx(self, file_path: str | os.PathLike, input_sample: Any = None, **kwargs: Any) -> Any:
        """Export to ONNX with ``torch.onnx.export`` (``input_sample`` defaults to ``example_input_array``).

        :param file_path: the ``.onnx`` file to write.
        :param input_sample: a tensor or a tuple of them to run the module with; ``None``: ``example_input_array``.
        """
        return export.to_onnx(self, file_path, input_sample, **kwargs)


def _collection_items(value: Any) -> Any:
    """A torchmetrics MetricCollection's (name, metric) pairs, as Lightning logs them; None for anything else."""
    if not hasattr(value, "compute"):  # torchmetrics is imported only for what could be a collection
        return None
    from torchmetrics import MetricCollection

    if not isinstance(value, MetricCollection):
        return None
    # as Lightning: the states are shared, not copied, only where the collection computes metrics in groups
    return value.items(keep_base=False, copy_state=not getattr(value, "_enable_compute_groups", False))
