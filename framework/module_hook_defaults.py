"""The hooks a ``Module`` may override, each a no-op (or the default action) until it does.

Each hook's description is written here once: ``Callback`` and ``DataModule`` show the same text for their hooks of
the same name (:mod:`framework.hook_docs`), and the order the loops call them in is in :mod:`framework.hooks`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.optim import Optimizer

from framework.hook_docs import document_hooks
from framework.hooks import Owner
from framework.nested import move_to_device


@document_hooks(Owner.MODULE)
class ModuleHooks:
    """Every hook of the fit, validate, test and predict loops, as a ``Module`` sees it."""

    def prepare_data(self) -> None:
        """Download or write data to disk, before any process sets anything up: state assigned here is not seen by
        the other processes (assign it in ``setup``).

        Example::

            def prepare_data(self):
                torchvision.datasets.MNIST(self.data_dir, download=True)
        """

    def setup(self, stage: str) -> None:
        """At the start of every run (fit, validate, test, predict), after ``prepare_data`` and before
        ``configure_model``: build datasets, split them, or make layers that depend on the data.

        :param stage: the entry point running: ``"fit"``, ``"validate"``, ``"test"`` or ``"predict"``.
        """

    def teardown(self, stage: str) -> None:
        """At the end of every run that ended without an exception (a run that raised calls ``on_exception``
        instead): release what ``setup`` took.

        :param stage: as in ``setup``.
        """

    def on_fit_start(self) -> None:
        """At the start of ``fit``, once the model, optimizers and a resumed checkpoint are in place, before the
        sanity check."""

    def on_fit_end(self) -> None:
        """At the end of ``fit``, after training stopped (also by ``max_time`` or early stopping), before
        ``teardown``."""

    def on_train_start(self) -> None:
        """Once a fit, after the sanity check and before the first training epoch."""

    def on_train_end(self) -> None:
        """After the last training epoch (or the step that stopped the fit), before ``on_fit_end``."""

    def on_train_epoch_start(self) -> None:
        """At the start of each training epoch, before its first batch is fetched."""

    def on_train_epoch_end(self) -> None:
        """At the end of each training epoch, after its last batch and after the validation that ends it. Epoch
        values logged during it are reduced by then; to act on every batch's output, keep them in an attribute
        in ``training_step`` and use (and clear) them here.

        Example::

            def on_train_epoch_end(self):
                self.log("epoch_mean", torch.stack(self.losses).mean())
                self.losses.clear()
        """

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        """Before each ``training_step``, once the batch is on the device.

        :param batch: the batch, on the device.
        :param batch_idx: its index in the epoch.
        :returns: ``-1`` to end the epoch here (the batch is not trained on); anything else goes on.
        """

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After each training batch: its backward, and its optimizer step where the batch ends an accumulation
        window.

        :param outputs: ``training_step``'s dict (else ``{}``), with ``"loss"`` (the loss backward saw, divided by
            ``accumulate_grad_batches`` and detached) where there is one.
        :param batch: the batch, on the device.
        :param batch_idx: its index in the epoch.
        """

    def on_before_backward(self, loss: torch.Tensor) -> None:
        """Before each backward of automatic optimization (and each ``manual_backward``).

        :param loss: the loss about to be backpropagated (divided by ``accumulate_grad_batches``).
        """

    def on_after_backward(self) -> None:
        """After each backward, before the gradients are unscaled or clipped: under ``16-mixed`` they are still
        multiplied by the loss scale here (``on_before_optimizer_step`` sees them unscaled). Where a batch only
        accumulates, its gradients are partial sums."""

    def on_before_optimizer_step(self, optimizer: Optimizer) -> None:
        """Before each optimizer step (once per step, not per accumulated batch), after the gradients are
        unscaled and before they are clipped: the place to look at or log gradient norms.

        Example::

            def on_before_optimizer_step(self, optimizer):
                norms = [p.grad.norm() for p in self.parameters() if p.grad is not None]
                self.log("grad_norm", torch.stack(norms).norm())

        :param optimizer: the optimizer about to step.
        """

    def on_before_zero_grad(self, optimizer: Optimizer) -> None:
        """Before ``optimizer_zero_grad``: on the first batch of each accumulation window, after its
        ``training_step``.

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

    def on_validation_start(self) -> None:
        """At the start of each validation (``validate``, the sanity check, and each one inside ``fit``), once
        the model is in eval mode, before the first batch."""

    def on_validation_end(self) -> None:
        """At the end of each validation, after ``on_validation_epoch_end``."""

    def on_validation_epoch_start(self) -> None:
        """Before the first batch of each validation (a validation is one epoch over every validation loader)."""

    def on_validation_epoch_end(self) -> None:
        """After the last batch of each validation: log a value computed over the whole validation here (the
        values logged in ``validation_step`` with ``on_epoch=True`` are reduced by then)."""

    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before each ``validation_step``.

        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several.
        """

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After each ``validation_step``.

        :param outputs: what ``validation_step`` returned.
        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several.
        """

    def on_test_start(self) -> None:
        """At the start of ``test``, once the model is in eval mode, before the first batch."""

    def on_test_end(self) -> None:
        """At the end of ``test``, after ``on_test_epoch_end``."""

    def on_test_epoch_start(self) -> None:
        """Before the first batch of ``test`` (one epoch over every test loader)."""

    def on_test_epoch_end(self) -> None:
        """After the last batch of ``test``: log a value computed over the whole test set here."""

    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before each ``test_step``.

        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several.
        """

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After each ``test_step``.

        :param outputs: what ``test_step`` returned.
        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several.
        """

    def on_predict_start(self) -> None:
        """At the start of ``predict``, once the model is in eval mode, before the first batch."""

    def on_predict_end(self) -> None:
        """At the end of ``predict``, after ``on_predict_epoch_end``."""

    def on_predict_epoch_start(self) -> None:
        """Before the first batch of ``predict``."""

    def on_predict_epoch_end(self) -> None:
        """After the last batch of ``predict``; ``trainer.predict_loop.predictions`` holds what the steps
        returned."""

    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before each ``predict_step``.

        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several.
        """

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After each ``predict_step``.

        :param outputs: what ``predict_step`` returned.
        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several.
        """

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch before it moves to the device (in every loop).

        :param batch: the batch as the loader gave it.
        :param dataloader_idx: the loader's index (0 in training).
        :returns: the batch to move.
        """
        return batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move a batch to the device; by default every tensor in any nesting of lists, tuples, dicts and
        dataclasses. Override it for a batch type of your own.

        :param batch: the batch, as ``on_before_batch_transfer`` returned it.
        :param device: the device of this process.
        :param dataloader_idx: the loader's index (0 in training).
        :returns: the batch on ``device``.
        """
        return move_to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch once it is on the device (GPU augmentation, for instance).

        :param batch: the batch, on the device.
        :param dataloader_idx: the loader's index (0 in training).
        :returns: the batch the step receives.
        """
        return batch

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Before a checkpoint is written (``ModelCheckpoint``, ``trainer.save_checkpoint``, a preemption): what
        is added to ``checkpoint`` is saved with it, and ``on_load_checkpoint`` gets it back.

        Example::

            def on_save_checkpoint(self, checkpoint):
                checkpoint["vocabulary"] = self.vocabulary

        :param checkpoint: the checkpoint dict about to be written; change it in place.
        """

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """When a checkpoint is loaded (``ckpt_path=``, a resumed run, ``load_from_checkpoint``), before its
        weights are loaded: restore what ``on_save_checkpoint`` added, or change the checkpoint (rename keys of an
        older version) before the weights are read from it.

        Example::

            def on_load_checkpoint(self, checkpoint):
                self.vocabulary = checkpoint["vocabulary"]

        :param checkpoint: the loaded checkpoint dict.
        """

    def on_exception(self, exception: BaseException) -> None:
        """When a run raises (``KeyboardInterrupt`` and a preemption included); the exception propagates
        afterwards, and ``teardown`` is not called. Other processes may be elsewhere (waiting in a collective), so
        what runs here runs on this process alone: no collective.

        :param exception: the exception raised.
        """
