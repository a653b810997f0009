"""``Checkpoint``, the base of the callbacks that save checkpoints, and ``OnExceptionCheckpoint``."""

import os
from typing import Any

from framework import console
from framework.callbacks.base import Callback
from framework.errors import MisconfigurationError, describe
from framework.protocols import TrainerLike


class Checkpoint(Callback):
    """The base class of checkpoint-saving callbacks: they run after every other callback (so they save what the
    others have done at the same point), and ``trainer.checkpoint_callbacks`` lists them.

    Example::

        class EveryHundredSteps(Checkpoint):
            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                if trainer.global_step % 100 == 0:
                    trainer.save_checkpoint(f"step={trainer.global_step}.ckpt")
    """

    runs_last = True


class OnExceptionCheckpoint(Checkpoint):
    """Save ``dirpath/filename.ckpt`` when ``fit`` raises, from the state it had reached, to resume from there.

    Nothing is saved outside ``fit``, during the sanity check, or where every rank must write a part of the
    checkpoint (sharded strategies: it warns instead).

    :param dirpath: the directory to save in (``~`` is expanded).
    :param filename: the file's name without ``.ckpt``; ``"on_exception"`` by default.
    :raises MisconfigurationError: where ``filename`` is not a non-empty string.

    Example::

        trainer = Trainer(callbacks=[OnExceptionCheckpoint(dirpath="checkpoints")])
        trainer.fit(model)          # crashes at step 1234 ...
        trainer.fit(model, ckpt_path="checkpoints/on_exception.ckpt")   # ... goes on from step 1234
    """

    #: The suffix of the file written (``on_exception.ckpt``).
    FILE_EXTENSION = ".ckpt"

    def __init__(self, dirpath: str | os.PathLike, filename: str = "on_exception") -> None:
        if not isinstance(filename, str) or not filename:
            raise MisconfigurationError(f"OnExceptionCheckpoint(filename={describe(filename)}): accepted is a file "
                                        "name without extension, e.g. 'on_exception'.")
        self.dirpath = os.path.expanduser(os.fspath(dirpath))
        self.filename = filename

    @property
    def ckpt_path(self) -> str:
        """Where the checkpoint goes."""
        return os.path.join(self.dirpath, self.filename + self.FILE_EXTENSION)

    def on_exception(self, trainer: TrainerLike, pl_module: Any, exception: BaseException) -> None:
        """Save the state fit had reached (nothing outside fit, or where every rank must write a part)."""
        if trainer.state.fn != "fit" or trainer.sanity_checking:
            return
        strategy = trainer.runtime.strategy
        if not strategy.saves_on_one_rank:  # the other ranks are elsewhere: they cannot write their parts now
            console.warn_user(f"OnExceptionCheckpoint saved nothing after {type(exception).__name__}: "
                              f"strategy={strategy.name!r} needs every rank to write a checkpoint, and this rank "
                              "handles its failure alone. Resume from the last checkpoint saved before it.")
            return
        trainer.save_checkpoint(self.ckpt_path)
        if trainer.is_global_zero:
            console.info(f"{type(exception).__name__} raised ({exception}); saved a checkpoint to {self.ckpt_path}")
