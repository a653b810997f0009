"""``StochasticWeightAveraging``: from a given epoch on, train with the SWA learning rate and average the weights
of each epoch's end; end with the average (batch norm statistics recomputed for it)."""

from typing import Any, Literal

import torch
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

from framework.callbacks.base import Callback
from framework.callbacks.weight_averaging import copy_state
from framework.errors import MisconfigurationError, describe
from framework.protocols import TrainerLike
from framework.utilities.types import LRSchedulerConfig


class StochasticWeightAveraging(Callback):
    """Stochastic Weight Averaging (Izmailov et al., 2018), as PyTorch's ``swa_utils`` recipe runs it: from epoch
    ``swa_epoch_start`` (an int, or a fraction of ``max_epochs``) the learning rate anneals to ``swa_lrs`` over
    ``annealing_epochs`` (``SWALR`` replaces the Module's scheduler) and the weights at each epoch's end join the
    average (``avg_fn``: equal weights by default). Fit ends with the average in the Module, its batch norm
    statistics recomputed over the training data. The average and the SWA scheduler are kept in checkpoints.

    :param swa_lrs: the learning rate SWALR anneals to: a positive float, or a list of them, one per parameter
        group of the first optimizer (the one it steers).
    :param swa_epoch_start: the first SWA epoch (``trainer.current_epoch``, from 0): an int >= 1, or a float in
        [0, 1], that fraction of ``max_epochs`` (default 0.8).
    :param annealing_epochs: over how many epochs the learning rate anneals to ``swa_lrs`` (default 10).
    :param annealing_strategy: ``"cos"`` (default) or ``"linear"``.
    :param avg_fn: ``AveragedModel``'s ``avg_fn(averaged, current, num_averaged)``; ``None`` (default): the mean.
    :param device: where the average is kept (default ``"cpu"``); ``None``: on the Module's device.
    :raises MisconfigurationError: where ``swa_epoch_start`` is neither an int >= 1 nor a float in [0, 1],
        ``swa_lrs`` is not a positive float or a non-empty list of them, or ``annealing_strategy`` is neither "cos" nor
        "linear".

    Example::

        Trainer(max_epochs=20, callbacks=[StochasticWeightAveraging(swa_lrs=1e-2, swa_epoch_start=15)])
    """

    def __init__(self, swa_lrs: float | list[float], swa_epoch_start: int | float = 0.8, annealing_epochs: int = 10,
                 annealing_strategy: Literal["cos", "linear"] = "cos", avg_fn: Any = None,
                 device: torch.device | str | None = "cpu") -> None:
        if isinstance(swa_epoch_start, bool) or (isinstance(swa_epoch_start, int) and swa_epoch_start < 1) or (
                isinstance(swa_epoch_start, float) and not 0 <= swa_epoch_start <= 1):
            raise MisconfigurationError(f"StochasticWeightAveraging(swa_epoch_start={describe(swa_epoch_start)}): "
                                        "accepted an int epoch >= 1 or a float fraction of max_epochs in [0, 1].")
        rates = swa_lrs if isinstance(swa_lrs, list) else [swa_lrs]
        if not rates or not all(isinstance(lr, float) and lr > 0 for lr in rates):
            raise MisconfigurationError(f"StochasticWeightAveraging(swa_lrs={describe(swa_lrs)}): accepted a positive "
                                        "float, or a list of them (one per parameter group).")
        if annealing_strategy not in ("cos", "linear"):
            raise MisconfigurationError(f"StochasticWeightAveraging(annealing_strategy="
                                        f"{describe(annealing_strategy)}): accepted 'cos' or 'linear'.")
        self._swa_lrs, self._swa_epoch_start = swa_lrs, swa_epoch_start
        self._annealing_epochs, self._annealing_strategy = annealing_epochs, annealing_strategy
        self._avg_fn, self._device = avg_fn, device
        self._average_model: AveragedModel | None = None
        self._swa_scheduler: SWALR | None = None
        self._user_schedulers: list[Any] = []
        self._saved: dict[str, Any] = {}
        self._trained: dict[str, torch.Tensor] | None = None  # the trained weights, once fit ended on the average
        self.swa_start = 0

    def setup(self, trainer: TrainerLike, pl_module: Any, stage: str) -> None:
        """Work out the first SWA epoch and make the averaged copy.

        :raises MisconfigurationError: where ``swa_epoch_start`` is a fraction and the fit has no epoch limit.
        """
        if stage != "fit":
            return
        epochs = trainer.epoch_limit
        if isinstance(self._swa_epoch_start, float):
            if epochs == -1:
                raise MisconfigurationError("StochasticWeightAveraging(swa_epoch_start=<fraction>) needs max_epochs; "
                                            "give swa_epoch_start as an epoch number instead.")
            self.swa_start = int(self._swa_epoch_start * epochs)
        else:
            self.swa_start = self._swa_epoch_start
        self._average_model = AveragedModel(pl_module, device=self._device, avg_fn=self._avg_fn, use_buffers=False)
        self._swa_scheduler, self._trained = None, None

    def on_train_epoch_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """From the first SWA epoch on, step the learning rate with SWALR instead of the Module's scheduler."""
        if self._swa_scheduler is None and trainer.current_epoch >= self.swa_start:
            optimizer = trainer.optimizers[0]
            rates = self._swa_lrs if isinstance(self._swa_lrs, list) else [self._swa_lrs] * len(optimizer.param_groups)
            self._swa_scheduler = SWALR(optimizer, swa_lr=rates, anneal_epochs=self._annealing_epochs,
                                        anneal_strategy=self._annealing_strategy)
            if "scheduler" in self._saved:  # resumed inside the SWA phase
                self._swa_scheduler.load_state_dict(self._saved["scheduler"])
            self._user_schedulers = list(trainer.lr_scheduler_configs)
            trainer.lr_scheduler_configs = [LRSchedulerConfig(self._swa_scheduler)]

    def on_train_epoch_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Add this epoch's weights to the average."""
        if self._swa_scheduler is not None:
            self._average_model.update_parameters(pl_module)

    def on_train_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """End with the average, its batch norm statistics recomputed over the training data."""
        if self._average_model is None or int(self._average_model.n_averaged) == 0:
            return
        if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in pl_module.modules()):
            device = next(self._average_model.parameters()).device  # where the average lives (cpu by default)
            update_bn(trainer.train_dataloader, self._average_model, device=device)
        self._trained = {name: value.detach().clone() for name, value in pl_module.state_dict().items()}
        copy_state(self._average_model.module, pl_module)

    def on_save_checkpoint(self, trainer: TrainerLike, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """The checkpoint's scheduler states are the Module's own, as ``configure_optimizers`` makes them again;
        saved after fit, it holds the average as its weights and the trained ones beside them, to resume."""
        if self._swa_scheduler is not None and "lr_schedulers" in checkpoint:
            checkpoint["lr_schedulers"] = [config.scheduler.state_dict() for config in self._user_schedulers]
        if self._trained is not None:
            checkpoint["current_model_state"] = self._trained

    def on_load_checkpoint(self, trainer: TrainerLike, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """Resuming trains on from the trained weights, not the average the run ended with."""
        if "current_model_state" in checkpoint and trainer.state.fn == "fit":
            pl_module.load_state_dict(checkpoint["current_model_state"])

    def state_dict(self) -> dict[str, Any]:
        """The average and the SWA scheduler, once the SWA phase began."""
        if self._average_model is None or self._swa_scheduler is None:
            return {}
        return {"average": self._average_model.state_dict(), "scheduler": self._swa_scheduler.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (applied once the run's averaged copy exists)."""
        self._saved = dict(state_dict)

    def on_fit_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """A resumed run goes on with the saved average."""
        if self._average_model is not None and "average" in self._saved:
            self._average_model.load_state_dict(self._saved["average"])
