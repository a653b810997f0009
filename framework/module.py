"""``Module``: the user's model, its step functions and its hooks."""

import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from framework import export
from framework.hook_docs import document_hooks
from framework.hooks import Owner
from framework.hparams import HyperparametersMixin, build_from_hparams, read_hparams_file
from framework.loader_hooks import LoaderHooks
from framework.module_hook_defaults import ModuleHooks
from framework.module_logging import LoggingMethods
from framework.module_optimization import OptimizationMethods
from framework.module_steps import StepMethods
from framework.protocols import TrainerLike


@document_hooks(Owner.MODULE)
class Module(StepMethods, ModuleHooks, LoggingMethods, LoaderHooks, HyperparametersMixin, OptimizationMethods,
             nn.Module):
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
        #: True (the default): the Trainer runs backward on what ``training_step`` returns and steps the optimizers.
        #: False (manual optimization, for GANs or several optimizers): ``training_step`` calls
        #: ``self.optimizers()``, ``self.manual_backward(loss)``, ``optimizer.step()`` and ``optimizer.zero_grad()``
        #: itself (see ``manual_backward``).
        self.automatic_optimization: bool = True
        #: Whether ``load_from_checkpoint`` and resuming require every key of the module in the checkpoint.
        self.strict_loading: bool = True
        #: An input batch, for the model summary's sizes and for ``to_onnx`` or tracing without an explicit one.
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
        """The Trainer this module is attached to.

        :raises RuntimeError: where it is attached to none (before a Trainer runs it).
        """
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
