"""``ModelSummary``: a table of the model's layers and parameter counts, printed when fit starts."""

from typing import Any

from framework import console
from framework.callbacks.base import Callback
from framework.checks import check_int
from framework.protocols import TrainerLike
from framework.utilities.model_summary import Summary, readable_count

__all__ = ["ModelSummary", "Summary", "readable_count"]


class ModelSummary(Callback):
    """Print the model's layers (to ``max_depth``, ``-1`` for all) and parameter totals when fit starts.

    :param max_depth: how deep to list submodules (default 1: the model's children); -1 lists all, 0 prints
        nothing.
    :param summarize_kwargs: kept for subclasses that draw the table their way (``RichModelSummary``); unused here.

    Example::

        Trainer(callbacks=[ModelSummary(max_depth=2)])
    """

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        check_int("ModelSummary", "max_depth", max_depth, -1)
        self.max_depth = max_depth
        self._summarize_kwargs = summarize_kwargs  # for subclasses that format the table their way, as Lightning's

    def on_fit_start(self, trainer: TrainerLike, pl_module: Any) -> None:
        """Print the table on global rank 0 (nothing with ``max_depth=0``)."""
        if self.max_depth != 0 and trainer.is_global_zero:
            precision, example = trainer.runtime.precision, getattr(pl_module, "example_input_array", None)
            if example is not None:
                example = precision.convert_input(example)
            self.summarize(Summary(pl_module, self.max_depth, example, precision.autocast))

    def summarize(self, summary: Summary) -> None:
        """Show ``summary`` (subclasses show it their way: ``RichModelSummary``)."""
        console.info("\n" + str(summary))
