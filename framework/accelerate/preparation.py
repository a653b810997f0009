"""``Accelerator.prepare`` and its parts: models wrapped for the strategy, optimizers and schedulers stepping as
Accelerate's do, dataloaders dealing each process its batches (the Accelerator subclasses ``PrepareMethods``)."""

from typing import Any

import torch
from torch import nn
from torch.optim import Optimizer
from torch.utils.data import DataLoader

from framework.accelerate import deepspeed, settings
from framework.accelerate.data import PreparedDataLoader, prepared_loader
from framework.accelerate.prepared import AcceleratedOptimizer, AcceleratedScheduler
from framework.accelerate.utils.deepspeed import DummyOptim, DummyScheduler
from framework.errors import MisconfigurationError
from framework.runtime.runtime import use_set_up_parameters
from framework.runtime.wrappers import RuntimeModule, forward_module, original_optimizer


class PrepareMethods:
    """The Accelerator's ``prepare`` methods; they keep what they prepared in its ``_models``, ``_optimizers``,
    ``_schedulers`` and ``_dataloaders``."""

    def prepare(self, *args: Any, device_placement: list[bool] | None = None) -> Any:
        """Models, optimizers, dataloaders and LR schedulers, in any order and number, returned prepared in the
        same order (one object alone as it is); anything else is returned unchanged.

        :param device_placement: one ``bool`` per object, for its models and dataloaders; ``None`` (the
            default): the Accelerator's ``device_placement``.
        """
        placements = device_placement or [None] * len(args)
        prepared = list(args)
        kinds = [_kind(obj) for obj in args]
        if self.deepspeed_plugin is not None:
            deepspeed.fill_auto_values(self, args)
        for wanted in ("model", "optimizer", "scheduler", "dataloader"):  # models first: FSDP swaps the parameters
            if wanted == "optimizer" and self.deepspeed_plugin is not None and "optimizer" in kinds:
                self._prepare_deepspeed_pair(args, kinds, prepared)  # the engine takes both at once
                continue
            for index, (obj, kind) in enumerate(zip(args, kinds, strict=False)):
                if kind == wanted and prepared[index] is obj:
                    prepared[index] = self._prepare_one(kind, obj, placements[index])
        return prepared[0] if len(prepared) == 1 else tuple(prepared)

    def _prepare_deepspeed_pair(self, args: tuple[Any, ...], kinds: list[str | None], prepared: list[Any]) -> None:
        """DeepSpeed's engine over the prepared model, the optimizer and the scheduler among ``args``."""
        optimizers = [index for index, kind in enumerate(kinds) if kind == "optimizer"]
        schedulers = [index for index, kind in enumerate(kinds) if kind == "scheduler"]
        if len(optimizers) > 1 or len(schedulers) > 1:
            raise MisconfigurationError("Under DeepSpeed, prepare one model with one optimizer (and at most one "
                                        "scheduler): the engine steps them together.")
        scheduler = args[schedulers[0]] if schedulers else None
        optimizer, wrapped = self._prepare_deepspeed_optimizer(args[optimizers[0]], scheduler)
        prepared[optimizers[0]] = optimizer
        if wrapped is not None:  # the engine steps it; a torch scheduler is prepared after, as usual
            prepared[schedulers[0]] = wrapped

    def _prepare_deepspeed_optimizer(self, optimizer: Any, scheduler: Any) -> tuple[Any, Any]:
        if not self._models:
            raise MisconfigurationError("Under DeepSpeed, prepare the model with (or before) its optimizer: "
                                        "accelerator.prepare(model, optimizer, dataloader).")
        if self._runtime.strategy.engine is not None and self._optimizers:
            raise MisconfigurationError("Under DeepSpeed one optimizer is prepared: the engine has one already.")
        optimizer, wrapped = deepspeed.start_engine(self, optimizer, scheduler)
        self._optimizers.append(optimizer)
        if wrapped is not None:
            self._schedulers.append(wrapped)
        return optimizer, wrapped

    def _prepare_one(self, kind: str, obj: Any, placement: bool | None) -> Any:
        if kind == "model":
            return self.prepare_model(obj, device_placement=placement)
        if kind == "optimizer":
            return self.prepare_optimizer(obj)
        if kind == "scheduler":
            return self.prepare_scheduler(obj)
        return self.prepare_data_loader(obj, device_placement=placement)

    def prepare_model(self, model: nn.Module, device_placement: bool | None = None,
                      evaluation_mode: bool = False) -> nn.Module:
        """``model`` on the device, wrapped for the strategy (DDP, FSDP2), its forward under autocast with float32
        outputs in mixed precision.

        :param model: the ``torch.nn.Module`` to prepare.
        :param device_placement: ``None`` (the default): the Accelerator's ``device_placement``.
        :param evaluation_mode: ``True`` puts the prepared model in eval mode; default ``False``.
        """
        if isinstance(model, RuntimeModule):
            return model
        names = {parameter: name for name, parameter in model.named_parameters()}
        placement = self.device_placement if device_placement is None else device_placement
        settings.check_wrapped_classes(self._runtime.strategy, model)
        prepared = self._runtime.setup_module(model, move_to_device=placement, float_outputs=self.native_amp)
        self._models.append(prepared)
        self._parameter_names.append(names)
        if evaluation_mode:
            prepared.eval()
        return prepared

    def prepare_optimizer(self, optimizer: Optimizer, device_placement: bool | None = None) -> AcceleratedOptimizer:
        """``optimizer`` stepping through the precision, only when the gradients are synced.

        :param optimizer: a torch optimizer over a prepared model's parameters.
        :param device_placement: accepted for Accelerate's sake; not used.
        """
        if isinstance(optimizer, AcceleratedOptimizer):
            return optimizer
        if self.deepspeed_plugin is not None:
            deepspeed.fill_auto_values(self, (optimizer,))
            return self._prepare_deepspeed_optimizer(optimizer, None)[0]
        strategy = self._runtime.strategy
        for model, names in zip(self._models, self._parameter_names, strict=False):
            use_set_up_parameters((optimizer,), names, strategy.unwrap(forward_module(model)), strategy.name)
        prepared = AcceleratedOptimizer(self._runtime.setup_optimizer(optimizer), runtime=self._runtime,
                                        gradient_state=self.gradient_state)
        self._optimizers.append(prepared)
        return prepared

    def prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        """``scheduler`` stepping after each optimizer step that happened (``num_processes`` times).

        :param scheduler: a torch LR scheduler over a prepared optimizer.
        :raises MisconfigurationError: where ``scheduler`` is a ``DummyScheduler`` (``prepare`` it with its model).
        """
        if isinstance(scheduler, AcceleratedScheduler):
            return scheduler
        if isinstance(scheduler, DummyScheduler):
            raise MisconfigurationError("Under DeepSpeed, prepare a DummyScheduler with the model and its "
                                        "DummyOptim: accelerator.prepare(model, optimizer, dataloader, scheduler).")
        own = [opt for opt in self._optimizers if original_optimizer(opt) is getattr(scheduler, "optimizer", None)]
        prepared = AcceleratedScheduler(scheduler, own or list(self._optimizers), self.step_scheduler_with_optimizer,
                                        gradient_state=self.gradient_state, num_processes=self.num_processes)
        self._schedulers.append(prepared)
        return prepared

    def prepare_data_loader(self, data_loader: Any, device_placement: bool | None = None) -> PreparedDataLoader:
        """``data_loader`` handing this process its batches (batch ``i`` of a pass to process ``i mod N``), on the
        device.

        :param data_loader: a DataLoader (or another iterable of batches).
        :param device_placement: ``None`` (the default): the Accelerator's ``device_placement``.
        """
        if isinstance(data_loader, PreparedDataLoader):
            return data_loader
        placement = self.device_placement if device_placement is None else device_placement
        config = self.dataloader_config
        prepared = prepared_loader(data_loader, self._runtime, self.gradient_state, self.num_processes,
                                   self.process_index, self.even_batches,
                                   self._runtime.to_device if placement else _as_it_is,
                                   seedable=config.use_seedable_sampler, data_seed=config.data_seed)
        self._dataloaders.append(prepared)
        return prepared


def _kind(obj: Any) -> str | None:
    if isinstance(obj, nn.Module):
        return "model"
    if isinstance(obj, (Optimizer, DummyOptim)):
        return "optimizer"
    if isinstance(obj, (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau,
                        DummyScheduler)):
        return "scheduler"
    if isinstance(obj, DataLoader):
        return "dataloader"
    return None


def _as_it_is(batch: Any) -> Any:
    return batch


