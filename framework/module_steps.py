"""What a ``Module`` computes in each loop: ``training_step``, ``validation_step``, ``test_step``,
``predict_step``, and what it adds to the run (``configure_callbacks``, ``configure_model``)."""

from typing import Any

from framework.errors import MisconfigurationError


class StepMethods:
    """The Module's steps (the Module subclasses this)."""

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """Compute the loss of one training batch; needed to ``fit``. Runs on every process, on its own part of
        the data; ``self.log`` works here.

        It is called as ``training_step(batch, batch_idx)`` and may return:

        - the loss, a scalar tensor: the Trainer runs backward on it and steps the optimizer;
        - a dict with a ``"loss"`` tensor and any other keys, all of which ``on_train_batch_end`` receives;
        - ``None``: this batch is skipped (no backward, no step; warned once a fit).

        In manual optimization (``self.automatic_optimization = False``) the step does its own backward and
        optimizer steps, and may return anything (or nothing).

        Example::

            def training_step(self, batch, batch_idx):
                x, y = batch
                loss = torch.nn.functional.cross_entropy(self(x), y)
                self.log("train_loss", loss, prog_bar=True)
                return loss

        :param batch: the batch, on this process's device (after the batch-transfer hooks).
        :param batch_idx: its index in the epoch.
        :raises MisconfigurationError: where the Module does not override it and ``fit`` runs, or where it returns
            something other than the forms above.
        """
        raise MisconfigurationError(f"{type(self).__qualname__} must define training_step(batch, batch_idx) to fit.")

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        """Compute and log the metrics of one validation batch. Runs on every process in ``validate``, in the
        sanity check and in each validation inside ``fit`` (gradients off, eval mode); ``self.log`` works here,
        and values logged with the default ``on_epoch=True`` are averaged over the validation (``sync_dist=True``:
        over every process too). Not overriding it turns validation off.

        Example::

            def validation_step(self, batch, batch_idx):
                x, y = batch
                self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y))

        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several (declare it then).
        :returns: anything (``on_validation_batch_end`` receives it); ``None`` is usual.
        """

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        """Compute and log the metrics of one test batch, as ``validation_step`` does for validation. Runs on
        every process in ``test``; ``self.log`` works here, and the values logged are what ``test`` returns.

        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several (declare it then).
        :returns: anything (``on_test_batch_end`` receives it).
        :raises MisconfigurationError: where the Module does not override it and ``test`` runs.
        """
        raise MisconfigurationError(f"{type(self).__qualname__} must define test_step(batch, batch_idx) to test.")

    def predict_step(self, batch: Any, batch_idx: int = 0, dataloader_idx: int = 0) -> Any:
        """What ``predict`` returns for one batch; by default ``self(batch)``. Runs on every process, gradients
        off; ``self.log`` raises here. ``predict`` returns the list of every batch's result (a list per loader
        with several loaders).

        Example::

            def predict_step(self, batch, batch_idx):
                x, _ = batch
                return self(x).argmax(dim=1)

        :param batch: the batch, on the device.
        :param batch_idx: its index in the loader.
        :param dataloader_idx: the loader's index; passed only where there are several.
        :returns: the batch's prediction, any object.
        """
        return self(batch)

    def configure_callbacks(self) -> Any:
        """Callbacks this Module needs whichever Trainer runs it (an ``EarlyStopping`` on its own metric, for
        instance), asked for at the start of every run. A callback returned here replaces the Trainer's callback
        of the same type; checkpoint callbacks still run last.

        Example::

            def configure_callbacks(self):
                return [EarlyStopping(monitor="val_acc", mode="max")]

        :returns: a callback or a list of them.
        """
        return []

    def configure_model(self) -> None:
        """Create layers here, rather than in ``__init__``, where the strategy should shape them as they are
        made: under ``FSDPStrategy`` and ``ModelParallelStrategy`` (``self.device_mesh``) a large model is then
        built sharded instead of whole on every process. Called at the start of every run, after ``setup``, so it
        must not build layers that already exist.

        Example::

            def configure_model(self):
                if self.net is None:
                    self.net = build_transformer(self.config)
        """
