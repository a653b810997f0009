"""The learning-rate range test (``lr_find``, what ``Tuner.lr_find`` runs): train a few steps while the learning
rate grows, and suggest the one where the loss falls fastest; and ``LearningRateFinder``, the callback running it
when fit starts. It takes the Trainer it acts on as an argument and starts trial runs of that Trainer's class."""

import contextlib
import math
from collections.abc import Iterator
from typing import Any

from framework import console
from framework.callbacks.base import Callback
from framework.callbacks.lr_finder_result import LRFinder
from framework.callbacks.tuning_trials import holder_of, model_kept, trial_trainer, write_value
from framework.checks import check_int
from framework.errors import MisconfigurationError, describe
from framework.protocols import TrainerLike
from framework.utilities.optimizer_config import parse_optimizers

_MODES = ("exponential", "linear")


class _Recorder(Callback):
    """Sets each step's learning rate, records the smoothed loss, and stops once the loss has diverged."""

    def __init__(self, finder: LRFinder, early_stop_threshold: float | None, beta: float = 0.98) -> None:
        self.finder, self.early_stop_threshold, self.beta = finder, early_stop_threshold, beta
        self._average, self._best = 0.0, math.inf
        self._step = 0

    def on_train_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        if len(trainer.optimizers) != 1:
            raise MisconfigurationError("lr_find searches the learning rate of one optimizer; configure_optimizers "
                                        f"gave {len(trainer.optimizers)}.")

    def on_train_batch_start(self, trainer: TrainerLike, pl_module: Any, batch: Any, batch_idx: int) -> None:
        lr = self.finder.lr_at(self._step)
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = lr

    def on_train_batch_end(self, trainer: TrainerLike, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if trainer.state.global_step == self._step:  # accumulating: no step yet
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        value = float(loss) * trainer.accumulate_grad_batches if loss is not None else math.nan
        self._average = self.beta * self._average + (1 - self.beta) * value
        smoothed = self._average / (1 - self.beta ** (self._step + 1))
        self.finder.results["lr"].append(self.finder.lr_at(self._step))
        self.finder.results["loss"].append(smoothed)
        self._step += 1
        if not math.isfinite(smoothed) or (self.early_stop_threshold is not None and self._step > 1
                                           and smoothed > self.early_stop_threshold * self._best):
            trainer.should_stop = True
        self._best = min(self._best, smoothed)

    def state_dict(self) -> dict[str, Any]:
        """What was recorded: on ranks the Trainer started, rank 0's comes back to this process this way."""
        return {"lr": list(self.finder.results["lr"]), "loss": list(self.finder.results["loss"])}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take in what rank 0 recorded."""
        self.finder.results = {"lr": list(state_dict["lr"]), "loss": list(state_dict["loss"])}


def lr_find(trainer: TrainerLike, model: Any, train_dataloaders: Any = None, val_dataloaders: Any = None,
            datamodule: Any = None, min_lr: float = 1e-8, max_lr: float = 1.0, num_training: int = 100,
            mode: str = "exponential", early_stop_threshold: float | None = 4.0, update_attr: bool = True,
            attr_name: str = "") -> LRFinder:
    """See ``Tuner.lr_find``."""
    if mode not in _MODES:
        raise MisconfigurationError(f"lr_find(mode={describe(mode)}): accepted {list(_MODES)}.")
    if not 0 < min_lr < max_lr:
        raise MisconfigurationError(f"lr_find(min_lr={min_lr}, max_lr={max_lr}): accepted 0 < min_lr < max_lr.")
    check_int("lr_find", "num_training", num_training, 2)
    if not model.automatic_optimization:
        raise MisconfigurationError("lr_find needs automatic optimization: it sets the learning rate before each "
                                    "step the Trainer takes.")
    name = _lr_attribute(model, attr_name) if update_attr else None
    finder = LRFinder(mode, min_lr, max_lr, num_training)
    search = trial_trainer(trainer, [_Recorder(finder, early_stop_threshold)], max_steps=num_training,
                           max_epochs=-1, max_time=None, limit_val_batches=0, num_sanity_val_steps=0,
                           val_check_interval=None, check_val_every_n_epoch=1)
    with model_kept(model, trainer), _without_schedulers(model):
        search.fit(model, train_dataloaders, val_dataloaders, datamodule=datamodule)
    if name is not None:
        suggested = finder.suggestion()
        if suggested is not None:
            write_value(model, name, suggested)
            console.info(f"Learning rate set to {suggested}")
    return finder


@contextlib.contextmanager
def _without_schedulers(model: Any) -> Iterator[None]:
    """The Module's optimizers without its LR schedulers: the search sets the learning rate itself."""
    configure = model.configure_optimizers
    model.__dict__["configure_optimizers"] = lambda: parse_optimizers(configure())[0]
    try:
        yield
    finally:
        del model.__dict__["configure_optimizers"]


def _lr_attribute(model: Any, attr_name: str) -> str:
    names = [attr_name] if attr_name else ["lr", "learning_rate"]
    for name in names:
        if holder_of(name, model) is not None:
            return name
    if attr_name:
        raise MisconfigurationError(f"lr_find(attr_name={attr_name!r}): {type(model).__name__} has no attribute or "
                                    "hyperparameter of that name to write the suggestion to.")
    raise MisconfigurationError("When using the learning rate finder either specify the attr_name or have a `lr`/"
                                f"`learning_rate` field in {type(model).__name__} or its hparams (or pass "
                                "update_attr=False).")


class LearningRateFinder(Callback):
    """Run ``Tuner.lr_find`` when fit starts (on its own trial runs) and train with the suggested learning rate:
    it is written to the Module's ``lr``/``learning_rate`` (or ``attr_name``) and to the optimizer's parameter
    groups. ``optimal_lr`` holds the finder. One process only: under several, run the Tuner before fit.

    The arguments are checked when the search runs (fit's start), not here.

    :param min_lr: the learning rate of the first step (default 1e-8); ``0 < min_lr < max_lr``.
    :param max_lr: the top of the range (default 1.0): step ``i`` (from 0) trains ``i / num_training_steps`` of
        the way up from ``min_lr`` (on a log scale when exponential), so the last step stays just below it.
    :param num_training_steps: how many optimizer steps the search trains (an int >= 2, default 100), fewer when
        it stops early; the Module's LR schedulers are left out of it.
    :param mode: how the learning rate grows between them: ``"exponential"`` (the default) or ``"linear"``.
    :param early_stop_threshold: stop once the smoothed loss exceeds this many times its lowest (default 4.0);
        ``None``: only a loss that is not finite stops it.
    :param update_attr: ``True`` (the default) writes the suggestion, when there is one, to the Module and the
        optimizer; ``False`` writes nothing (``optimal_lr.suggestion()`` still gives it).
    :param attr_name: the Module's attribute or hyperparameter taking the suggestion; ``""`` (the default):
        ``lr``, else ``learning_rate``. With ``update_attr``, a Module without it is refused.

    Example::

        trainer = Trainer(callbacks=[LearningRateFinder(num_training_steps=50)])
        trainer.fit(model)
    """

    def __init__(self, min_lr: float = 1e-8, max_lr: float = 1.0, num_training_steps: int = 100,
                 mode: str = "exponential", early_stop_threshold: float | None = 4.0, update_attr: bool = True,
                 attr_name: str = "") -> None:
        self._settings = dict(min_lr=min_lr, max_lr=max_lr, num_training=num_training_steps, mode=mode,
                              early_stop_threshold=early_stop_threshold, update_attr=update_attr, attr_name=attr_name)
        self._update_attr = update_attr
        self.optimal_lr: Any = None

    def lr_find(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Search, and apply the suggestion to the running optimizer.

        :raises MisconfigurationError: where the run has several processes.
        """
        if trainer.world_size > 1:
            raise MisconfigurationError("LearningRateFinder runs in one process only: with several, call "
                                        "Tuner(trainer).lr_find(model) before fit.")
        self.optimal_lr = lr_find(trainer, pl_module, trainer.run_context.given_loaders.get("train"),
                                  datamodule=trainer.datamodule, **self._settings)
        suggested = self.optimal_lr.suggestion() if self._update_attr else None
        if suggested is not None:
            for optimizer in trainer.optimizers:
                for group in optimizer.param_groups:
                    group["lr"] = suggested

    def on_fit_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Search before training starts (override to search at other times, e.g. ``on_train_epoch_start``)."""
        self.lr_find(trainer, pl_module)
