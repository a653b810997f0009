"""``self.log`` and ``self.log_dict``: what a Module records for loggers, the progress bar and
``trainer.callback_metrics`` (the Module subclasses ``LoggingMethods``; the values go to the running loop's
results, ``framework.trainer.results``)."""

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from framework.errors import MisconfigurationError, describe, unloggable_value


class LoggingMethods:
    """The Module's logging methods; they write to its ``_results`` (the running loop's, None outside one)."""

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
        :raises MisconfigurationError: where ``on_step`` and ``on_epoch`` are both ``False``; where called in
            ``predict_step``, in a hook that may not log, or outside the loops of the Trainer the Module is attached
            to; without a Trainer, where ``value`` is ``None`` or a mapping.
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
        :raises MisconfigurationError: where ``dictionary`` is neither a mapping nor a ``MetricCollection``.
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



def _collection_items(value: Any) -> Any:
    """A torchmetrics MetricCollection's (name, metric) pairs, as Lightning logs them; None for anything else."""
    if not hasattr(value, "compute"):  # torchmetrics is imported only for what could be a collection
        return None
    from torchmetrics import MetricCollection

    if not isinstance(value, MetricCollection):
        return None
    # as Lightning: the states are shared, not copied, only where the collection computes metrics in groups
    return value.items(keep_base=False, copy_state=not getattr(value, "_enable_compute_groups", False))
