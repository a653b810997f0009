"""``ModelCheckpoint``: save checkpoints when due, keep the best k by a monitored metric."""

import os
import time
import warnings
from datetime import timedelta
from typing import Any, Literal

import torch

from framework import console
from framework.callbacks.background_saves import BackgroundSaves
from framework.callbacks.checkpoint import Checkpoint
from framework.callbacks.checkpoint_files import (
    default_dirpath,
    holds_checkpoints,
    link,
    removable,
    remove_unfinished_writes,
    resolved_dirpath,
    write_problem,
)
from framework.callbacks.checkpoint_names import CheckpointNames
from framework.callbacks.checkpoint_state import TopKState
from framework.callbacks.model_checkpoint_checks import check_arguments, check_link_target, check_save_last
from framework.callbacks.monitor_mode import IMPROVES
from framework.errors import MisconfigurationError
from framework.protocols import TrainerLike


class ModelCheckpoint(CheckpointNames, TopKState, Checkpoint):
    """Save a checkpoint every epoch (or every ``every_n_train_steps`` / ``train_time_interval``) and keep the best.

    With ``monitor`` the ``save_top_k`` best files by that logged metric are kept, and files that
    fall out of the top k are deleted; without it the latest file is kept. Every file is written
    atomically, so a crash never leaves a half-written checkpoint or loses the earlier ones.

    ``last.ckpt`` holds the state at the latest save point (every epoch end, and every
    ``every_n_train_steps``), whether or not a top-k file was written there; Lightning 2.6
    updates it only along with a top-k file, which leaves it stale after epochs that did not
    improve.

    ``async_save=True`` writes the files in a background thread while training goes on (as
    does ``Trainer(plugins=[AsyncCheckpointIO()])`` for every ModelCheckpoint): the state is
    copied to host memory at the save point, one save is in flight at a time (the next waits
    for it), and the files it replaces are deleted only once it is complete. A failed write is
    raised at the next save point or at the end of fit. ``best_model_path`` may name a file
    still being written until then.

    :param dirpath: the directory, local or any fsspec path; ``None`` (default): ``<save_dir>/<name>/<version>/
        checkpoints`` of the first logger that has a directory, else ``<default_root_dir>/checkpoints``.
    :param filename: a template over logged metrics, ``epoch`` and ``step``: ``"{epoch}-{val_loss:.2f}"`` gives
        ``epoch=3-val_loss=0.12.ckpt``; ``None`` (default): ``"{epoch}-{step}"``.
    :param monitor: the logged metric ranking the files, e.g. ``"val_loss"``; ``None`` (default): no ranking.
    :param verbose: log each save, and each value that did not make the top k (default False).
    :param save_last: True also writes ``last.ckpt`` at every save point; ``"link"`` makes it a symbolic link to
        the file saved at the same step (local directories only; a real file when none was); ``None`` (default)
        or False: no ``last.ckpt``.
    :param save_top_k: how many best files to keep (default 1); -1 keeps every file, 0 none. Without
        ``monitor`` only -1, 0 and 1 are accepted.
    :param save_on_exception: True also saves when fit raises (default False).
    :param save_weights_only: True saves the weights and counters but no optimizer, scheduler, precision or
        callback state, so training cannot resume from the file (default False).
    :param mode: ``"min"`` (default): lower ``monitor`` values are better; ``"max"``: higher ones.
    :param auto_insert_metric_name: True (default): ``{epoch}`` gives ``epoch=3``; False: ``3``.
    :param every_n_train_steps: save every this many optimizer steps; ``None`` (default) or 0: not by steps.
    :param train_time_interval: save each time this ``datetime.timedelta`` of training has passed (checked after
        optimizer steps); ``None`` (default): not by time.
    :param every_n_epochs: save every this many epochs (0: not by epochs); ``None`` (default): 1 when neither
        of the two above is given (the three are alternatives).
    :param save_on_train_epoch_end: True saves at the training epoch's end, False after validation; ``None``
        (default): at the epoch's end when validation runs once every epoch, else after it.
    :param enable_version_counter: True (default) adds ``-v1``, ``-v2``... to a name already taken; False
        writes over the file of that name.
    :param async_save: True writes in a background thread, as above (default False).

    Example::

        best = ModelCheckpoint(monitor="val_loss", save_top_k=3, save_last=True,
                               filename="{epoch}-{val_loss:.3f}")
        trainer = Trainer(callbacks=[best])
        trainer.fit(model)
        print(best.best_model_path, best.best_model_score)
    """

    reads_epoch_metrics = True

    def __init__(
        self,
        dirpath: str | os.PathLike | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        verbose: bool = False,
        save_last: bool | Literal["link"] | None = None,
        save_top_k: int = 1,
        save_on_exception: bool = False,
        save_weights_only: bool = False,
        mode: str = "min",
        auto_insert_metric_name: bool = True,
        every_n_train_steps: int | None = None,
        train_time_interval: timedelta | None = None,
        every_n_epochs: int | None = None,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
        async_save: bool = False,
    ) -> None:
        check_arguments(monitor, save_top_k, mode, every_n_train_steps, every_n_epochs, train_time_interval,
                        async_save)
        check_save_last(save_last)
        self.async_save = async_save
        # Made by setup for a run: the callback itself holds only settings and bookkeeping, so a copy or a
        # pickle of it equals it.
        self._saves: BackgroundSaves | None = None
        self.dirpath = resolved_dirpath(dirpath) if dirpath is not None else None
        self.filename = filename
        self.monitor = monitor
        self.verbose = verbose
        self.save_last = save_last
        self.save_top_k = save_top_k
        self.save_on_exception = save_on_exception
        self.save_weights_only = save_weights_only
        self.mode = mode
        self.auto_insert_metric_name = auto_insert_metric_name
        self._save_on_train_epoch_end = save_on_train_epoch_end
        self._enable_version_counter = enable_version_counter
        self._train_time_interval = train_time_interval
        if every_n_train_steps is None and every_n_epochs is None and train_time_interval is None:
            every_n_epochs = 1  # the default: one checkpoint per epoch
        self._every_n_train_steps = every_n_train_steps or 0
        self._every_n_epochs = every_n_epochs or 0
        self._per_batch = bool(self._every_n_train_steps or train_time_interval)
        self._last_time_checked: float | None = None
        self._last_global_step_saved = -1
        self._last_checkpoint_saved = ""
        self._warned_missing = False
        #: The top-k checkpoints kept so far: each file's path and its ``monitor`` score.
        self.best_k_models: dict[str, torch.Tensor] = {}
        #: The path of the worst of the kept top-k checkpoints (the next to go when a better one comes).
        self.kth_best_model_path = ""
        #: The score of ``kth_best_model_path``; a new checkpoint must beat it to be kept.
        self.kth_value = torch.tensor(float("inf") if mode == "min" else float("-inf"))
        #: The ``monitor`` score of ``best_model_path``; ``None`` before a checkpoint is kept or without ``monitor``.
        self.best_model_score: torch.Tensor | None = None
        #: The path of the best checkpoint so far (without ``monitor``: the latest); ``""`` before the first save.
        #: ``trainer.test(ckpt_path="best")`` loads it.
        self.best_model_path = ""
        #: The path of the last ``last.ckpt`` written (``save_last``); ``""`` if none.
        self.last_model_path = ""
        #: The ``monitor`` score at the latest check, whether or not it was kept.
        self.current_score: torch.Tensor | None = None

    @property
    def every_n_epochs(self) -> int:
        """Save every this many epochs (0: not by epochs)."""
        return self._every_n_epochs

    @property
    def state_key(self) -> str:
        """Two ModelCheckpoints that differ in what or when they save keep separate states."""
        return self._generate_state_key(
            monitor=self.monitor, mode=self.mode, every_n_train_steps=self._every_n_train_steps,
            every_n_epochs=self._every_n_epochs, train_time_interval=self._train_time_interval,
        )

    # -- when to save ---
    def setup(self, trainer: TrainerLike, pl_module: Any, stage: str) -> None:
        """Decide the directory (rank 0's choice for every rank), refuse ``save_last="link"`` outside this machine's
        file system, pick this run's background writer, and when fitting check the directory can be written to.

        :raises MisconfigurationError: where a fit is to save checkpoints and rank 0 cannot write to ``dirpath``.
        """
        dirpath = self.dirpath if self.dirpath is not None else default_dirpath(trainer)
        self.dirpath = trainer.runtime.broadcast(dirpath)
        check_link_target(self.save_last, self.dirpath)
        self._saves = BackgroundSaves(self, trainer.checkpoint_io, self.async_save)
        if stage != "fit" or trainer.fast_dev_run or (self.save_top_k == 0 and not self.save_last):
            return
        problem = write_problem(self.dirpath) if trainer.is_global_zero else None
        problem = trainer.runtime.broadcast(problem)  # every rank fails alike, none waits for the others
        if problem is not None:
            raise MisconfigurationError(
                f"ModelCheckpoint cannot write to dirpath={self.dirpath!r}: {problem}. Pass a writable dirpath=."
            )
        if trainer.is_global_zero:
            remove_unfinished_writes(self.dirpath, self.FILE_EXTENSION)
        if trainer.is_global_zero and holds_checkpoints(self.dirpath, self.FILE_EXTENSION):
            warnings.warn(f"Checkpoint directory {self.dirpath} exists and holds checkpoints; this run writes "
                          "beside them (a name clash gets a -v1 suffix) and deletes only its own.", stacklevel=2)

    def on_train_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Start the clock of ``train_time_interval``."""
        self._last_time_checked = time.monotonic()

    def on_train_batch_end(self, trainer: TrainerLike, pl_module: Any,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        """Save when ``every_n_train_steps`` optimizer steps or ``train_time_interval`` have passed, after a batch that
        ended with an optimizer step: gradients accumulated for the next step are not in a checkpoint, so one saved
        between accumulated batches would not resume exactly (the first batch of a run resumed between two of its
        steps, or a time-based save, would otherwise save there)."""
        if not self._per_batch or self._skips(trainer) or not _stepped(trainer):
            return
        due_by_steps = self._every_n_train_steps > 0 and trainer.global_step % self._every_n_train_steps == 0
        due_by_time = False
        if self._train_time_interval is not None:
            now = time.monotonic()
            elapsed = now - (self._last_time_checked or now)
            # every rank must agree, or one would wait in a collective the others skip
            due_by_time = trainer.runtime.broadcast(elapsed >= self._train_time_interval.total_seconds())
            if due_by_time:
                self._last_time_checked = now
        if due_by_steps or due_by_time:
            self._save_due(trainer)

    def on_train_epoch_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Save every ``every_n_epochs`` epochs (and ``last``), here when validation does not decide it."""
        if not self._skips(trainer) and self._saves_on_train_epoch_end(trainer):
            self._save_due(trainer, top_k=self._epoch_due(trainer))

    def on_validation_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Save every ``every_n_epochs`` epochs (and ``last``) after validation, when it runs inside the epoch."""
        if not self._skips(trainer) and not self._saves_on_train_epoch_end(trainer):
            self._save_due(trainer, top_k=self._epoch_due(trainer))

    def on_train_end(self, trainer: TrainerLike, pl_module: Any) -> None:
        """With ``save_last``, write ``last`` if nothing was saved during the whole run; wait for the writes."""
        if self.save_last and not self._last_checkpoint_saved and not trainer.fast_dev_run:
            with self._saves.save_point(trainer):
                self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        self._saves.end(trainer)

    def on_exception(self, trainer: TrainerLike, pl_module: Any, exception: BaseException) -> None:
        """Wait for a save in flight; with ``save_on_exception``, save the state fit had reached when it raised."""
        if self._saves is None:  # fit failed before this callback was set up: there is no training state to save
            return
        self._saves.abandon()
        if (not self.save_on_exception or trainer.fast_dev_run or trainer.sanity_checking
                or self._last_global_step_saved == trainer.global_step or self.dirpath is None):
            return
        strategy = trainer.runtime.strategy
        if not strategy.saves_on_one_rank:  # the other ranks are elsewhere: they cannot write their parts now
            console.warn_user(f"ModelCheckpoint(save_on_exception=True) saved nothing after "
                              f"{type(exception).__name__}: strategy={strategy.name!r} needs every rank to write a "
                              "checkpoint, and this rank handles its failure alone. Resume from the last checkpoint "
                              "saved before it.")
            return
        candidates = self._monitor_candidates(trainer)
        filepath = self.format_checkpoint_name(candidates)
        self._save(trainer, filepath)
        self._save_last_checkpoint(trainer, candidates)
        if trainer.is_global_zero:
            console.info(f"{type(exception).__name__} raised ({exception}); saved a checkpoint to {filepath}")

    def _skips(self, trainer: TrainerLike) -> bool:
        return (bool(trainer.fast_dev_run) or trainer.state.fn != "fit" or trainer.sanity_checking
                or self._last_global_step_saved == trainer.global_step)

    def _epoch_due(self, trainer: TrainerLike) -> bool:
        return self._every_n_epochs >= 1 and (trainer.current_epoch + 1) % self._every_n_epochs == 0

    def _saves_on_train_epoch_end(self, trainer: TrainerLike) -> bool:
        """By default at the training epoch's end, unless validation runs several times an epoch or not every epoch."""
        if self._save_on_train_epoch_end is not None:
            return self._save_on_train_epoch_end
        if trainer.check_val_every_n_epoch != 1:
            return False
        if trainer.val_check_interval == 1.0:
            return True
        # Validating inside the epoch: save after it, unless no rank has validation batches (a rank's own count
        # may be 0 while the others validate, so it asks them).
        return not trainer.runtime.reduce_boolean_decision(any(trainer.num_val_batches), all=False)

    def _save_due(self, trainer: TrainerLike, top_k: bool = True) -> None:
        """One save point: a top-k file (when ``top_k``) and ``last``."""
        with self._saves.save_point(trainer):
            candidates = self._monitor_candidates(trainer)
            if top_k:
                self._save_topk_checkpoint(trainer, candidates)
            self._save_last_checkpoint(trainer, candidates)

    # -- top k ---
    def _save_topk_checkpoint(self, trainer: TrainerLike, candidates: dict[str, torch.Tensor]) -> None:
        if self.save_top_k == 0:
            return
        if self.monitor is None:
            self._save_latest_only(trainer, candidates)
            return
        current = candidates.get(self.monitor)
        if current is None:
            available = sorted(k for k in candidates if k not in ("epoch", "step"))
            message = (f"ModelCheckpoint(monitor={self.monitor!r}) could not find {self.monitor!r} in the logged "
                       f"metrics: {available}. Log it with self.log({self.monitor!r}, value) in the Module, or change "
                       "monitor=.")
            # Before any validation a validation metric cannot exist yet (a save every n steps): skip, as Lightning.
            if trainer.state.validated or not trainer.enable_validation:
                raise MisconfigurationError(message)
            if not self._warned_missing:
                warnings.warn(message + " No checkpoint was saved by it until the metric appears.", stacklevel=2)
                self._warned_missing = True
            return
        if self._better_than_kth(current):
            self._update_best_and_save(trainer, current, candidates)
        elif self.verbose and trainer.is_global_zero:
            console.info(f"Epoch {trainer.current_epoch}, global step {trainer.global_step}: {self.monitor!r} "
                         f"was not in top {self.save_top_k}")

    def _better_than_kth(self, current: torch.Tensor) -> bool:
        if self.save_top_k == -1 or len(self.best_k_models) < self.save_top_k:
            return True
        return bool(IMPROVES[self.mode](current, self.best_k_models[self.kth_best_model_path].to(current.device)))

    def _update_best_and_save(self, trainer: TrainerLike, current: torch.Tensor,
                              candidates: dict[str, torch.Tensor]) -> None:
        k = len(self.best_k_models) + 1 if self.save_top_k == -1 else self.save_top_k
        dropped = ""
        if len(self.best_k_models) == k:
            dropped = self.kth_best_model_path
            self.best_k_models.pop(dropped)
        if torch.isnan(current):  # a nan is the worst possible score, never the best
            current = torch.tensor(float("inf") if self.mode == "min" else float("-inf"))
        filepath = self._free_filepath(trainer, candidates, dropped)
        self.current_score = current
        self.best_k_models[filepath] = current
        if len(self.best_k_models) == k:
            worst = max if self.mode == "min" else min
            self.kth_best_model_path = worst(self.best_k_models, key=self.best_k_models.get)
            self.kth_value = self.best_k_models[self.kth_best_model_path]
        best = min if self.mode == "min" else max
        self.best_model_path = best(self.best_k_models, key=self.best_k_models.get)
        self.best_model_score = self.best_k_models[self.best_model_path]
        if self.verbose and trainer.is_global_zero:
            console.info(f"Epoch {trainer.current_epoch}, global step {trainer.global_step}: {self.monitor!r} reached "
                         f"{current.item():0.5f} (best {self.best_model_score.item():0.5f}), saving model to "
                         f"{filepath!r} as top {k}")
        self._save(trainer, filepath)
        if dropped and self._may_remove(trainer, dropped, filepath):
            self._remove_once_written(trainer, dropped)

    def _save_latest_only(self, trainer: TrainerLike, candidates: dict[str, torch.Tensor]) -> None:
        """Without a monitor: save, and with ``save_top_k=1`` delete the file saved before."""
        filepath = self._free_filepath(trainer, candidates, self.best_model_path)
        previous, self.best_model_path = self.best_model_path, filepath
        if self.verbose and trainer.is_global_zero:
            console.info(f"Epoch {trainer.current_epoch}, global step {trainer.global_step}: saving model to "
                         f"{filepath!r}")
        self._save(trainer, filepath)
        if self.save_top_k == 1 and previous and self._may_remove(trainer, previous, filepath):
            self._remove_once_written(trainer, previous)

    def _save_last_checkpoint(self, trainer: TrainerLike, candidates: dict[str, torch.Tensor]) -> None:
        if not self.save_last:
            return
        filepath = self.format_checkpoint_name(candidates, self.CHECKPOINT_NAME_LAST)
        if self._enable_version_counter:
            filepath = self._free_filepath(trainer, candidates, self.last_model_path, self.CHECKPOINT_NAME_LAST)
        previous, self.last_model_path = self.last_model_path, filepath
        saved_here = self._last_global_step_saved == trainer.global_step and self._last_checkpoint_saved != filepath
        if self.save_last == "link" and saved_here and self.save_top_k != 0:
            self._link(trainer, self._last_checkpoint_saved, filepath)
        else:
            self._save(trainer, filepath)
        if previous and self._may_remove(trainer, previous, filepath):
            self._remove_once_written(trainer, previous)

    def _save(self, trainer: TrainerLike, filepath: str) -> None:
        trainer.save_checkpoint(filepath, self.save_weights_only)
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        self._saves.saved(trainer, filepath)

    def _remove_once_written(self, trainer: TrainerLike, filepath: str) -> None:
        """Delete ``filepath`` on rank 0 (which writes the files), once every file of this save point is
        written and linked (a kill before leaves it, and the files that still link to it, whole)."""
        if trainer.is_global_zero:
            self._saves.remove_after(filepath)

    def _link(self, trainer: TrainerLike, target: str, linkpath: str) -> None:
        """Point ``linkpath`` at ``target`` once it is written (a relative link, so the directory can move)."""
        if trainer.is_global_zero and os.path.abspath(target) != os.path.abspath(linkpath):
            self._saves.after_writes(lambda: link(target, linkpath), f"linking {linkpath!r} to {target!r}")
        trainer.runtime.barrier("link_checkpoint")

    def _may_remove(self, trainer: TrainerLike, previous: str, current: str) -> bool:
        """Only files of this callback's directory, never the one being written or the one resumed from."""
        return removable(previous, current, trainer.ckpt_path, self.dirpath)


def _stepped(trainer: TrainerLike) -> bool:
    """Whether the batch ending now ended with an optimizer step (True outside a fit loop that knows)."""
    return getattr(getattr(trainer, "fit_loop", None), "batch_stepped", True)
