"""Weight averaging: keep an average of the weights seen during training (``WeightAveraging``), or an exponential
moving average of them (``EMAWeightAveraging``); validate, checkpoint and end with the average."""

from typing import Any

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from framework.callbacks.base import Callback
from framework.errors import MisconfigurationError, describe
from framework.protocols import TrainerLike


class WeightAveraging(Callback):
    """Average the Module's weights with ``torch.optim.swa_utils.AveragedModel`` (``**kwargs`` go to it: ``avg_fn``,
    ``multi_avg_fn``), updated after every optimizer step by default (override ``should_update`` to choose).

    Validation runs on the averaged weights, checkpoints hold them as their ``state_dict`` (the weights being
    trained are kept beside them, so a resumed run goes on with both), and fit ends with them in the Module.
    Strategies that shard the parameters (FSDP) are refused.

    :param device: where the average is kept; ``None`` (default): on the Module's device.
    :param use_buffers: True (default) averages the buffers (batch norm statistics) too; False only the parameters.
    :param kwargs: other keyword arguments, for ``AveragedModel`` (``avg_fn``, ``multi_avg_fn``).

    Example::

        from torch.optim.swa_utils import get_swa_multi_avg_fn
        Trainer(callbacks=[WeightAveraging(multi_avg_fn=get_swa_multi_avg_fn())])
    """

    def __init__(self, device: torch.device | str | int | None = None, use_buffers: bool = True,
                 **kwargs: Any) -> None:
        self._device = device
        self._use_buffers = use_buffers
        self._kwargs = kwargs
        self._average_model: AveragedModel | None = None
        self._latest_update_step = 0
        self._swapped = False
        self._trained: dict[str, torch.Tensor] | None = None  # the trained weights, once fit ended on the average

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Whether to update the average after optimizer step ``step_idx`` (or at the end of epoch ``epoch_idx``).

        :param step_idx: the step just taken, from 0; ``None`` when asked at an epoch's end.
        :param epoch_idx: the epoch just ended, from 0; ``None`` when asked after a step.
        """
        return step_idx is not None

    # -- hooks ---
    def setup(self, trainer: TrainerLike, pl_module: Any, stage: str) -> None:
        """Make the averaged copy when fit starts.

        :raises MisconfigurationError: where the strategy shards the parameters (FSDP).
        """
        if stage != "fit":
            return
        if getattr(trainer.runtime.strategy, "replaces_parameters", False):
            raise MisconfigurationError(f"{type(self).__name__} needs each rank to hold whole parameters; "
                                        f"strategy={trainer.runtime.strategy.name!r} shards them. Use ddp or zero1.")
        self._average_model = AveragedModel(pl_module, device=self._device, use_buffers=self._use_buffers,
                                            **self._kwargs)
        self._latest_update_step = 0
        self._trained = None

    def on_train_batch_end(self, trainer: TrainerLike, pl_module: Any,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        """Update after an optimizer step, when ``should_update`` says so."""
        step = trainer.global_step
        if step > self._latest_update_step and self.should_update(step_idx=step - 1):
            self._average_model.update_parameters(pl_module)
            self._latest_update_step = step

    def on_train_epoch_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Update at the epoch's end, when ``should_update`` says so."""
        if self.should_update(epoch_idx=trainer.current_epoch):
            self._average_model.update_parameters(pl_module)

    def on_validation_epoch_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Validate the average."""
        if self._average_model is not None and not trainer.sanity_checking and trainer.state.fn == "fit":
            self._swap(pl_module)

    def on_validation_epoch_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Train the weights being trained again."""
        if self._swapped:
            self._swap(pl_module)

    def on_train_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """End with the average in the Module (the trained weights kept for a checkpoint saved afterwards, so
        resuming from it goes on training them)."""
        if self._average_model is not None:
            self._trained = {name: value.detach().clone() for name, value in pl_module.state_dict().items()}
            copy_state(self._average_model.module, pl_module)

    def on_save_checkpoint(self, trainer: TrainerLike, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """The checkpoint's weights are the average; the trained ones and the count go beside them."""
        if self._average_model is None or "state_dict" not in checkpoint:
            return
        average = self._average_model.module.state_dict()
        checkpoint["current_model_state"] = self._trained if self._trained is not None else checkpoint["state_dict"]
        checkpoint["state_dict"] = {name: average[name] for name in checkpoint["current_model_state"]}
        checkpoint["averaging_state"] = {"n_averaged": self._average_model.n_averaged.clone(),
                                         "latest_update_step": self._latest_update_step}

    def on_load_checkpoint(self, trainer: TrainerLike, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """Go on with the checkpoint's average and the weights it was training."""
        if self._average_model is None or "current_model_state" not in checkpoint:
            return
        self._average_model.module.load_state_dict(checkpoint["state_dict"])
        pl_module.load_state_dict(checkpoint["current_model_state"])
        state = checkpoint.get("averaging_state", {})
        if "n_averaged" in state:
            self._average_model.n_averaged.copy_(state["n_averaged"])
        self._latest_update_step = state.get("latest_update_step", trainer.global_step)

    def _swap(self, pl_module: nn.Module) -> None:
        for mine, averaged in zip(_tensors(pl_module, self._use_buffers),
                                  _tensors(self._average_model.module, self._use_buffers), strict=True):
            swapped = mine.detach().clone()
            mine.detach().copy_(averaged.detach())
            averaged.detach().copy_(swapped)
        self._swapped = not self._swapped


def _tensors(module: nn.Module, with_buffers: bool) -> list[torch.Tensor]:
    return [*module.parameters(), *(module.buffers() if with_buffers else ())]


def copy_state(source: nn.Module, target: nn.Module) -> None:
    """Copy ``source``'s parameters and buffers into ``target`` (the same architecture), in place."""
    for mine, averaged in zip(target.state_dict().values(), source.state_dict().values(), strict=True):
        mine.copy_(averaged)


class EMAWeightAveraging(WeightAveraging):
    """An exponential moving average of the weights, ``average = decay * average + (1 - decay) * weights``, updated
    every ``update_every_n_steps`` optimizer steps from ``update_starting_at_step`` (and, with
    ``update_starting_at_epoch``, at the end of each epoch from that one).

    :param device: where the average is kept; ``None`` (default): on the Module's device.
    :param use_buffers: True (default) averages the buffers (batch norm statistics) too; False only the parameters.
    :param decay: the weight of the average so far, in [0, 1] (default 0.999).
    :param update_every_n_steps: update after every this many optimizer steps (default 1); 0: not after steps.
    :param update_starting_at_step: the first step (from 0) updating the average; ``None`` (default): the first.
    :param update_starting_at_epoch: also update at the end of each epoch from this one; ``None`` (default): never.
    :param kwargs: other keyword arguments, for ``AveragedModel``.
    :raises MisconfigurationError: where ``decay`` is not in [0, 1].

    Example::

        Trainer(callbacks=[EMAWeightAveraging(decay=0.999, update_starting_at_step=1000)])
    """

    def __init__(self, device: torch.device | str | int | None = None, use_buffers: bool = True,
                 decay: float = 0.999, update_every_n_steps: int = 1, update_starting_at_step: int | None = None,
                 update_starting_at_epoch: int | None = None, **kwargs: Any) -> None:
        if not 0.0 <= decay <= 1.0:
            raise MisconfigurationError(f"EMAWeightAveraging(decay={describe(decay)}): accepted 0 <= decay <= 1.")
        super().__init__(device=device, use_buffers=use_buffers, multi_avg_fn=get_ema_multi_avg_fn(decay), **kwargs)
        self.update_every_n_steps = update_every_n_steps
        self.update_starting_at_step = update_starting_at_step
        self.update_starting_at_epoch = update_starting_at_epoch

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Every ``update_every_n_steps`` steps from ``update_starting_at_step``, or at each epoch's end from
        ``update_starting_at_epoch``."""
        if step_idx is not None:
            started = self.update_starting_at_step is None or step_idx >= self.update_starting_at_step
            if started and self.update_every_n_steps > 0 and step_idx % self.update_every_n_steps == 0:
                return True
        return (epoch_idx is not None and self.update_starting_at_epoch is not None
                and epoch_idx >= self.update_starting_at_epoch)
