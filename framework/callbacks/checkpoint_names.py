"""The file names of ``ModelCheckpoint``: the values they are made from, its template filled in, ``-v1`` ... on
clashes, the "last" files."""

from __future__ import annotations

import os
from typing import Any

import torch

from framework.callbacks.checkpoint_files import fill_template, versions_of
from framework.io.checkpoint_storage import SET_ASIDE_SUFFIX, complete_checkpoint_at
from framework.io.fs import exists
from framework.protocols import TrainerLike


class CheckpointNames:
    """How ``ModelCheckpoint`` names its files (its base; the names and characters are class attributes, so a
    subclass or an instance may change them).

    It reads the callback's ``dirpath``, ``filename``, ``auto_insert_metric_name``,
    ``last_model_path`` and ``_enable_version_counter``.
    """

    #: Between the parts of a name: ``epoch=3-step=400``.
    CHECKPOINT_JOIN_CHAR = "-"
    #: Between a metric's name and its value: ``val_loss=0.12``.
    CHECKPOINT_EQUALS_CHAR = "="
    #: The name of the ``save_last`` file (``last.ckpt``).
    CHECKPOINT_NAME_LAST = "last"
    #: The suffix of every checkpoint file.
    FILE_EXTENSION = ".ckpt"
    #: The first ``-v<n>`` suffix given to a name that exists already (``last-v1.ckpt``).
    STARTING_VERSION = 1

    dirpath: str | None
    filename: str | None
    auto_insert_metric_name: bool
    last_model_path: str
    _enable_version_counter: bool

    def format_checkpoint_name(self, metrics: dict[str, Any], filename: str | None = None,
                               ver: int | None = None) -> str:
        """The path for ``metrics``: ``filename`` (the template by default) filled in, ``-v<ver>`` on clashes.

        Example::

            ModelCheckpoint(dirpath="ckpts", filename="{epoch}-{val_loss:.2f}").format_checkpoint_name(
                {"epoch": 3, "val_loss": torch.tensor(0.1234)})     # '<cwd>/ckpts/epoch=3-val_loss=0.12.ckpt'
        """
        template = filename or self.filename or "{epoch}" + self.CHECKPOINT_JOIN_CHAR + "{step}"
        name = fill_template(template, metrics, self.CHECKPOINT_EQUALS_CHAR, self.auto_insert_metric_name)
        if ver is not None:
            name = self.CHECKPOINT_JOIN_CHAR.join((name, f"v{ver}"))
        name += self.FILE_EXTENSION
        return os.path.join(self.dirpath, name) if self.dirpath else name

    def _free_filepath(self, trainer: TrainerLike, candidates: dict[str, torch.Tensor], being_replaced: str,
                       filename: str | None = None) -> str:
        """The template's path, with ``-v1``, ``-v2`` ... while it names an existing file (other than the one
        about to be replaced)."""
        filepath = self.format_checkpoint_name(candidates, filename)
        version = self.STARTING_VERSION
        while self._enable_version_counter and filepath != being_replaced and self._file_exists(trainer, filepath):
            filepath = self.format_checkpoint_name(candidates, filename, ver=version)
            version += 1
        return filepath

    def _file_exists(self, trainer: TrainerLike, filepath: str) -> bool:
        return trainer.runtime.broadcast(exists(filepath))

    def find_last_checkpoints(self) -> list[str]:
        """The complete checkpoints that may be the latest "last" one: ``last_model_path`` and ``last.ckpt``,
        ``last-v1.ckpt`` ... in ``dirpath`` (a new run can resume from an earlier run's file this way).

        Only complete ones (``is_complete_checkpoint``): a file or directory whose save was killed midway
        is left out. Where a save was killed while it replaced a sharded ``last.ckpt`` (between its two
        renames), the previous one, whole, is found at ``last.ckpt.previous`` and counts instead.
        """
        found = (complete_checkpoint_at(name) for name in self.last_checkpoint_names())
        return sorted(path for path in found if path is not None)

    def last_checkpoint_names(self) -> list[str]:
        """The names a "last" checkpoint of this callback is found under, complete or not: ``last_model_path``,
        and ``last.ckpt``, ``last-v1.ckpt`` ... in ``dirpath`` (one whose replacement was cut short between its two
        renames counts under its own name)."""
        names = {self.last_model_path} if self.last_model_path else set()
        if self.dirpath is not None:
            names |= set(versions_of(self.dirpath, self.CHECKPOINT_NAME_LAST, self.FILE_EXTENSION))
            set_aside = versions_of(self.dirpath, self.CHECKPOINT_NAME_LAST, self.FILE_EXTENSION + SET_ASIDE_SUFFIX)
            names |= {path.removesuffix(SET_ASIDE_SUFFIX) for path in set_aside}
        return sorted(names)

    def _monitor_candidates(self, trainer: TrainerLike) -> dict[str, torch.Tensor]:
        """The values file names and the top-k ranking use: rank 0's, on every rank.

        Values logged without ``sync_dist`` differ between ranks (a rank without validation
        batches may have none); decided on each rank's own, the ranks would save and name files
        differently and wait for each other in different collectives.
        """
        candidates = {key: value.detach().cpu().clone() if isinstance(value, torch.Tensor) else torch.tensor(value)
                      for key, value in trainer.callback_metrics.items()}
        candidates.setdefault("epoch", torch.tensor(trainer.current_epoch))
        candidates["step"] = torch.tensor(trainer.global_step)
        return trainer.runtime.broadcast(candidates)
