"""The Callback base: every hook of ``framework.hooks`` as a method that does nothing.

A hook the Module has too is described once, on the Module (``framework.module_hook_defaults``); the reference shows
that text here with a callback's arguments.
"""

from __future__ import annotations

from typing import Any

from framework.hook_docs import document_hooks
from framework.hooks import Owner
from framework.module_hook_defaults import ModuleHooks


@document_hooks(Owner.CALLBACK, written_on=ModuleHooks)
class Callback:
    """Subclass and override the hooks you need; the Trainer calls only the overridden ones.

    Every hook gets ``(trainer, pl_module, ...)``, named as Lightning names them, so hooks called by
    keyword work as there. Callbacks run in the order given to the Trainer (checkpoint callbacks
    last), each before the Module's hook of the same name.

    Example::

        class PrintLoss(Callback):
            def on_train_epoch_end(self, trainer, pl_module):
                print(trainer.current_epoch, trainer.callback_metrics.get("loss"))
    """

    #: Checkpoint-saving callbacks set this so they run after every other callback.
    runs_last: bool = False
    #: Callbacks that act on epoch metrics (checkpointing, early stopping) set this so their
    #: ``on_train_epoch_end`` runs after the Module's, which may still log.
    reads_epoch_metrics: bool = False

    @property
    def state_key(self) -> str:
        """Key of this callback's state in a checkpoint; two instances with different settings differ."""
        return type(self).__qualname__

    def _generate_state_key(self, **settings: Any) -> str:
        """A state key naming the settings that set this instance apart (as Lightning's helper does).

        Example::

            @property
            def state_key(self):
                return self._generate_state_key(monitor=self.monitor)
        """
        return f"{type(self).__qualname__}{settings!r}"

    def state_dict(self) -> dict[str, Any]:
        """What this callback saves in checkpoints (under ``state_key``); nothing by default."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned, when ``fit`` resumes from a checkpoint."""
        pass

    def setup(self, trainer, pl_module, stage: str) -> None: ...
    def teardown(self, trainer, pl_module, stage: str) -> None: ...

    def on_fit_start(self, trainer, pl_module) -> None: ...
    def on_fit_end(self, trainer, pl_module) -> None: ...

    def on_sanity_check_start(self, trainer, pl_module) -> None:
        """Before the sanity check: the ``num_sanity_val_steps`` validation batches ``fit`` runs before training,
        to find a bug in the validation code before hours of training. ``trainer.sanity_checking`` is True until
        ``on_sanity_check_end``.

        :param trainer: the Trainer running the hook.
        :param pl_module: the Module being run.
        """

    def on_sanity_check_end(self, trainer, pl_module) -> None:
        """After the sanity check; what it logged is dropped, so no callback acts on it.

        :param trainer: the Trainer running the hook.
        :param pl_module: the Module being run.
        """

    def on_train_start(self, trainer, pl_module) -> None: ...
    def on_train_end(self, trainer, pl_module) -> None: ...
    def on_train_epoch_start(self, trainer, pl_module) -> None: ...
    def on_train_epoch_end(self, trainer, pl_module) -> None: ...
    def on_train_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int) -> None: ...
    def on_train_batch_end(self, trainer, pl_module, outputs: Any, batch: Any, batch_idx: int) -> None: ...

    def on_before_backward(self, trainer, pl_module, loss) -> None: ...
    def on_after_backward(self, trainer, pl_module) -> None: ...
    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None: ...
    def on_before_zero_grad(self, trainer, pl_module, optimizer) -> None: ...

    def on_validation_start(self, trainer, pl_module) -> None: ...
    def on_validation_end(self, trainer, pl_module) -> None: ...
    def on_validation_epoch_start(self, trainer, pl_module) -> None: ...
    def on_validation_epoch_end(self, trainer, pl_module) -> None: ...
    def on_validation_batch_start(
        self, trainer, pl_module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_validation_batch_end(
        self, trainer, pl_module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...

    def on_test_start(self, trainer, pl_module) -> None: ...
    def on_test_end(self, trainer, pl_module) -> None: ...
    def on_test_epoch_start(self, trainer, pl_module) -> None: ...
    def on_test_epoch_end(self, trainer, pl_module) -> None: ...
    def on_test_batch_start(self, trainer, pl_module, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_batch_end(
        self, trainer, pl_module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...

    def on_predict_start(self, trainer, pl_module) -> None: ...
    def on_predict_end(self, trainer, pl_module) -> None: ...
    def on_predict_epoch_start(self, trainer, pl_module) -> None: ...
    def on_predict_epoch_end(self, trainer, pl_module) -> None: ...
    def on_predict_batch_start(
        self, trainer, pl_module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...
    def on_predict_batch_end(
        self, trainer, pl_module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None: ...
    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        """When ``fit``, ``validate``, ``test`` or ``predict`` loads a checkpoint (``ckpt_path=``, a resumed run),
        once the Module's weights are loaded: read what this callback's ``on_save_checkpoint`` added. (Its own
        ``state_dict`` comes back through ``load_state_dict``.)

        :param trainer: the Trainer running the hook.
        :param pl_module: the Module being run.
        :param checkpoint: the loaded checkpoint dict.
        """
    def on_exception(self, trainer, pl_module, exception: BaseException) -> None: ...
