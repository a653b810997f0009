"""``DataModule``: the data of a run — download, split, and the loaders for every stage."""

import os
from collections.abc import Mapping, Sequence
from typing import Any

from torch.utils.data import DataLoader, Dataset, IterableDataset

from framework.hook_docs import document_hooks
from framework.hooks import Owner
from framework.hparams import HyperparametersMixin, build_from_hparams, read_hparams_file
from framework.loader_hooks import LoaderHooks
from framework.module_hook_defaults import ModuleHooks
from framework.nested import move_to_device
from framework.protocols import TrainerLike


@document_hooks(Owner.DATAMODULE, written_on=ModuleHooks)
class DataModule(LoaderHooks, HyperparametersMixin):
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
        self.trainer: TrainerLike | None = None
        self._forget_hyperparameters()
        #: False: ``prepare_data`` runs on global rank 0 only (a filesystem all nodes share), not once per node.
        self.prepare_data_per_node: bool = True

    def prepare_data(self) -> None: ...
    def setup(self, stage: str) -> None: ...
    def teardown(self, stage: str) -> None: ...

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        return batch

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        return move_to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        return batch

    def state_dict(self) -> dict[str, Any]:
        """What to save in checkpoints (under ``"datamodule"``)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned, when a run loads a checkpoint (``ckpt_path=``, a resumed fit),
        after the Module's weights."""

    @classmethod
    def from_datasets(cls, train_dataset: Any = None, val_dataset: Any = None, test_dataset: Any = None,
                      predict_dataset: Any = None, batch_size: int = 1, num_workers: int = 0,
                      **datamodule_kwargs: Any) -> "DataModule":
        """A DataModule whose loaders wrap the given datasets (each a Dataset, or a list or dict of them).

        Training data is shuffled (unless it is an IterableDataset); the other stages keep their order.

        Example::

            datamodule = DataModule.from_datasets(train_set, val_set, batch_size=64)
        """

        def loaders_of(datasets: Any, shuffle: bool) -> Any:
            def loader(dataset: Dataset) -> DataLoader:
                return DataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                                  shuffle=shuffle and not isinstance(dataset, IterableDataset))

            if isinstance(datasets, Mapping):
                return {key: loader(dataset) for key, dataset in datasets.items()}
            if isinstance(datasets, Sequence) and not isinstance(datasets, Dataset):
                return [loader(dataset) for dataset in datasets]
            return loader(datasets)

        datamodule = cls(**datamodule_kwargs)
        stages = {"train": (train_dataset, True), "val": (val_dataset, False), "test": (test_dataset, False),
                  "predict": (predict_dataset, False)}
        for stage, (datasets, shuffle) in stages.items():
            if datasets is not None:
                setattr(datamodule, f"{stage}_dataloader",
                        lambda datasets=datasets, shuffle=shuffle: loaders_of(datasets, shuffle))
        return datamodule

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: str | os.PathLike, hparams_file: str | os.PathLike | None = None,
                             weights_only: bool | None = None, **overrides: Any) -> "DataModule":
        """Rebuild the DataModule from the hyperparameters (and state) a Trainer checkpoint saved for it."""
        from framework.io.checkpoint_storage import load_checkpoint

        checkpoint = load_checkpoint(checkpoint_path, map_location="cpu", weights_only=weights_only)
        saved = (read_hparams_file(hparams_file) if hparams_file is not None
                 else checkpoint.get("datamodule_hyper_parameters", {}))
        datamodule = build_from_hparams(cls, saved, overrides)
        if "datamodule" in checkpoint:
            datamodule.load_state_dict(checkpoint["datamodule"])
        return datamodule
