"""``DataModule``: the data of a run — download, split, and the loaders for every stage."""

from __future__ import annotations

import inspect
from typing import Any

from framework.hparams import AttributeDict, init_arguments
from framework.runtime.transfer import move_to_device


class DataModule:
    """Groups data preparation and the loaders for fit, validate, test and predict.

    ``prepare_data`` runs once per node (local rank 0) and must not set state;
    ``setup(stage)`` runs on every process. Any ``*_dataloader`` left undefined means
    that stage has no data from this DataModule.

    Example::

        class Digits(framework.DataModule):
            def setup(self, stage):
                self.train, self.val = random_split(dataset, [0.8, 0.2])

            def train_dataloader(self):
                return DataLoader(self.train, batch_size=64, shuffle=True)

            def val_dataloader(self):
                return DataLoader(self.val, batch_size=256)
    """

    def __init__(self) -> None:
        self.trainer: Any = None
        self._hparams = AttributeDict()

    @property
    def hparams(self) -> AttributeDict:
        """What ``save_hyperparameters`` stored, readable as attributes; logged with the Module's."""
        return self._hparams

    def save_hyperparameters(self, *args: Any, ignore: str | list[str] | None = None) -> None:
        """Store the ``__init__`` arguments in ``self.hparams`` (saved in checkpoints)."""
        init_args = init_arguments(inspect.currentframe().f_back, self)
        chosen = {name: init_args[name] for name in args} if args else init_args
        ignored = {ignore} if isinstance(ignore, str) else set(ignore or ())
        self._hparams = AttributeDict({k: v for k, v in chosen.items() if k not in ignored})

    def prepare_data(self) -> None: ...
    def setup(self, stage: str) -> None: ...
    def teardown(self, stage: str) -> None: ...

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change ``batch`` before it moves to the device; overriding it here replaces the Module's hook."""
        return batch

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        """Move ``batch`` to ``device`` (tensors in any nesting); overriding it here replaces the Module's hook."""
        return move_to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change ``batch`` once it is on the device; overriding it here replaces the Module's hook."""
        return batch

    def state_dict(self) -> dict[str, Any]:
        """What to save in checkpoints (under ``"datamodule"``)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...
