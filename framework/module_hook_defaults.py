"""The hooks a ``Module`` may override, each a no-op (or the default action) until it does.

``framework.hooks`` says when each runs; ``Module`` inherits them from here, so the file
defining the model stays about the model.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.optim import Optimizer

from framework.nested import move_to_device


class ModuleHooks:
    """Every hook of the fit, validate, test and predict loops, as a ``Module`` sees it."""

    def prepare_data(self) -> None: ...

    def setup(self, stage: str) -> None:
        """At the start of every run, on every process, before ``configure_model``.

        :param stage: the entry point running: ``"fit"``, ``"validate"``, ``"test"`` or ``"predict"``.
        """

    def teardown(self, stage: str) -> None:
        """At the end of a run, on every process.

        :param stage: as in ``setup``.
        """

    def on_fit_start(self) -> None: ...
    def on_fit_end(self) -> None: ...
    def on_train_start(self) -> None: ...
    def on_train_end(self) -> None: ...
    def on_train_epoch_start(self) -> None: ...
    def on_train_epoch_end(self) -> None: ...

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        """Before ``training_step``; returning ``-1`` ends the epoch here.

        :param batch: the batch, on the device.
        :param batch_idx: its index in the epoch.
        """

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After the batch's optimizer step (or accumulation).

        :param outputs: ``training_step``'s dict (else ``{}``), with ``"loss"`` (the loss backward saw, detached)
            where there is one.
        :param batch: the batch, on the device.
        :param batch_idx: its index in the epoch.
        """

    def on_before_backward(self, loss: torch.Tensor) -> None:
        """Before each backward.

        :param loss: the loss about to be backpropagated.
        """

    def on_after_backward(self) -> None: ...

    def on_before_optimizer_step(self, optimizer: Optimizer) -> None:
        """Before each optimizer step (once per step, not per accumulated batch), before clipping.

        :param optimizer: the optimizer about to step.
        """

    def on_before_zero_grad(self, optimizer: Optimizer) -> None:
        """Before ``optimizer_zero_grad``.

        :param optimizer: the optimizer whose gradients are about to be cleared.
        """

    def on_validation_model_zero_grad(self) -> None:
        """Before each validation inside ``fit`` that follows an optimizer step: drop the gradients, so they hold
        no memory while validating (``self.zero_grad()``, as in Lightning). Not called inside an accumulation
        window, whose gradients are still needed."""
        self.zero_grad()

    def on_validation_model_eval(self) -> None:
        """Put the module in eval mode before validation (``self.eval()``)."""
        self.eval()

    def on_validation_model_train(self) -> None:
        """Back to train mode after validation; if not overridden, each submodule gets back its earlier mode instead."""
        self.train()

    def on_test_model_eval(self) -> None:
        """Put the module in eval mode before testing (``self.eval()``)."""
        self.eval()

    def on_test_model_train(self) -> None:
        """Back to train mode after testing; if not overridden, each submodule gets back its earlier mode instead."""
        self.train()

    def on_predict_model_eval(self) -> None:
        """Put the module in eval mode before predicting; afterwards each submodule gets back its earlier mode."""
        self.eval()

    def on_validation_start(self) -> None: ...
    def on_validation_end(self) -> None: ...
    def on_validation_epoch_start(self) -> None: ...
    def on_validation_epoch_end(self) -> None: ...

    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before ``validation_step``.

        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several.
        """

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After ``validation_step``.

        :param outputs: what ``validation_step`` returned.
        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several.
        """

    def on_test_start(self) -> None: ...
    def on_test_end(self) -> None: ...
    def on_test_epoch_start(self) -> None: ...
    def on_test_epoch_end(self) -> None: ...

    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before ``test_step``.

        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several.
        """

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After ``test_step``.

        :param outputs: what ``test_step`` returned.
        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several.
        """

    def on_predict_start(self) -> None: ...
    def on_predict_end(self) -> None: ...
    def on_predict_epoch_start(self) -> None: ...
    def on_predict_epoch_end(self) -> None: ...

    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before ``predict_step``.

        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several.
        """

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After ``predict_step``.

        :param outputs: what ``predict_step`` returned.
        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several.
        """

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change ``batch`` before it moves to the device; returns the batch. A DataModule's override wins.

        :param batch: the batch as the loader gave it.
        :param dataloader_idx: the loader's index (0 in training).
        """
        return batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move ``batch`` to ``device`` (tensors in any nesting); returns the batch. A DataModule's override wins.

        :param batch: the batch, as ``on_before_batch_transfer`` returned it.
        :param device: the device of this process.
        :param dataloader_idx: the loader's index (0 in training).
        """
        return move_to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change ``batch`` once on the device (e.g. GPU augmentation); returns it. A DataModule's override wins.

        :param batch: the batch, on the device.
        :param dataloader_idx: the loader's index (0 in training).
        """
        return batch

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Before a checkpoint is written; what is added to ``checkpoint`` is saved with it.

        :param checkpoint: the checkpoint dict about to be written.
        """

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """When a checkpoint is loaded (a ``ckpt_path``, ``load_from_checkpoint``), before its weights.

        :param checkpoint: the loaded checkpoint dict.
        """

    def on_exception(self, exception: BaseException) -> None:
        """When a run raises an exception.

        :param exception: the exception raised.
        """
