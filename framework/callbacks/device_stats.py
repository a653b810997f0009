"""``DeviceStatsMonitor``: log the accelerator's memory statistics (and the CPU's) around each batch."""

import importlib.util
from typing import Any

import torch

from framework.callbacks.base import Callback
from framework.errors import MisconfigurationError, require_package
from framework.protocols import TrainerLike


class DeviceStatsMonitor(Callback):
    """Log device statistics at the start and end of every training and validation batch that is a logging
    step (``log_every_n_steps``): ``torch.cuda.memory_stats`` on a GPU, and with ``cpu_stats`` (by default on a
    CPU run) the CPU's use through psutil (``pip install psutil``). Keys read
    ``DeviceStatsMonitor.on_train_batch_end/<stat>``. Reading them does not wait for the device. ``fit``
    refuses a Trainer without a logger.

    :param cpu_stats: True logs the CPU's use too (``psutil`` is then required); False never; ``None``
        (default): on a CPU run, when ``psutil`` is installed.

    Example::

        Trainer(callbacks=[DeviceStatsMonitor(cpu_stats=True)], log_every_n_steps=10)
    """

    def __init__(self, cpu_stats: bool | None = None) -> None:
        self._cpu_stats = cpu_stats

    def setup(self, trainer: TrainerLike, pl_module: Any, stage: str) -> None:
        """Refuse a run without a logger, or CPU statistics without psutil.

        :raises MisconfigurationError: where a fit runs with no logger.
        """
        if stage != "fit":
            return
        if not trainer.loggers:
            raise MisconfigurationError("Cannot use DeviceStatsMonitor callback with Trainer that has no logger: pass "
                                        "logger=True (or a logger), or remove the callback.")
        if self._cpu_stats:
            require_package("psutil", "DeviceStatsMonitor(cpu_stats=True)", extra="psutil")

    def _log(self, trainer: TrainerLike, key: str, ended: bool) -> None:
        every = trainer.log_every_n_steps
        step = trainer.state.batches_stepped - (1 if ended else 0)
        if not every or (step + 1) % every:
            return
        stats = self._stats(trainer.strategy.root_device)
        if stats:
            metrics = {f"{type(self).__qualname__}.{key}/{name}": value for name, value in stats.items()}
            for logger in trainer.loggers:
                logger.log_metrics(metrics=metrics, step=step)

    def _stats(self, device: torch.device) -> dict[str, float]:
        stats: dict[str, float] = {}
        if device.type == "cuda":
            stats.update({name: float(value) for name, value in torch.cuda.memory_stats(device).items()})
        cpu = self._cpu_stats if self._cpu_stats is not None else device.type == "cpu"
        if cpu and importlib.util.find_spec("psutil") is not None:
            import psutil

            stats.update(cpu_vm_percent=psutil.virtual_memory().percent, cpu_percent=psutil.cpu_percent(),
                         cpu_swap_percent=psutil.swap_memory().percent)
        return stats

    def on_train_batch_start(self, trainer: TrainerLike, pl_module: Any, batch: Any, batch_idx: int) -> None:
        """Log before the training batch."""
        self._log(trainer, "on_train_batch_start", ended=False)

    def on_train_batch_end(self, trainer: TrainerLike, pl_module: Any,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        """Log after the training batch."""
        self._log(trainer, "on_train_batch_end", ended=True)

    def on_validation_batch_start(self, trainer: TrainerLike, pl_module: Any, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        """Log before the validation batch (at the training step)."""
        if not trainer.sanity_checking:
            self._log(trainer, "on_validation_batch_start", ended=False)

    def on_validation_batch_end(self, trainer: TrainerLike, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        """Log after the validation batch (at the training step)."""
        if not trainer.sanity_checking:
            self._log(trainer, "on_validation_batch_end", ended=False)
