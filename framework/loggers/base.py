"""The Logger base: where logged metrics and hyperparameters go."""

import functools
from collections.abc import Callable
from typing import Any

from framework.utilities.rank_zero import rank_zero_only


class Logger:
    """Receives metrics as Python floats at the steps the Trainer decides.

    Subclasses implement ``log_metrics`` and usually ``log_hyperparams``; ``save`` and
    ``finalize`` flush. The Trainer calls loggers on global rank 0 only.

    Example::

        class PrintLogger(Logger):
            def log_metrics(self, metrics, step):
                print(step, metrics)
    """

    @property
    def name(self) -> str | None:
        """The logger's name; the class name by default."""
        return type(self).__name__

    @property
    def version(self) -> int | str | None:
        """This run's version among the logger's runs, or None when it keeps none."""
        return None

    @property
    def save_dir(self) -> str | None:
        """The directory the logger writes its runs under, or None."""
        return None

    @property
    def log_dir(self) -> str | None:
        """The directory of this run's files, or None; ``trainer.log_dir`` reads the first logger's."""
        return None

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Record ``metrics`` at ``step``.

        :param metrics: ``{name: value}``, the values Python floats.
        :param step: the step they belong to.
        """

    def log_hyperparams(self, params: dict[str, Any] | None = None) -> None:
        """Record the run's hyperparameters.

        :param params: ``{name: value}`` (the built-in loggers also take an ``argparse.Namespace``); ``None``: none.
        """

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Record the model's computation graph, where the logger can show one.

        :param model: the model.
        :param input_array: an input to trace it with; ``None`` (default): ``TensorBoardLogger`` traces
            ``model.example_input_array``.
        """

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """A checkpoint callback has just saved a file (loggers that upload checkpoints act here)."""

    def save(self) -> None:
        """Flush what is buffered."""

    def finalize(self, status: str) -> None:
        """The run ended with ``status`` ("success", "failed" or "interrupted")."""
        self.save()

    def run_state(self) -> dict[str, Any]:
        """Which run this logger writes and what it wrote so far (plain data), for its copies in other processes.

        Rank 0's goes to the other ranks when a run starts (so ``trainer.log_dir`` is the same
        everywhere), and back to the calling process after ranks the Trainer started (so the
        next ``fit``/``validate``/``test`` goes on in the same files instead of starting them again).
        """
        return {}

    def load_run_state(self, state: dict[str, Any]) -> None:
        """Take in what ``run_state`` returned in another process."""

    def log_restart(self, record: dict[str, Any]) -> None:
        """The run was started again and resumed by itself: ``record`` says which restart (``restart``, of
        ``max_restarts``), why (``reason``), from which ``checkpoint`` and at which ``global_step``. Kept beside the
        metrics, never as a metric row (a resumed run's metrics equal an uninterrupted run's)."""

    def checkpoint_position(self) -> dict[str, Any]:
        """Where this logger's output stands as a checkpoint is saved (plain data; empty when it cannot say):
        what it buffered is written first. A run resumed from the checkpoint hands it to ``resume_at``."""
        return {}

    def resume_at(self, position: dict[str, Any], epoch_end_row: dict[str, Any] | None = None) -> None:
        """A run resumes from a checkpoint saved at ``position`` (``checkpoint_position``'s): drop what an
        interrupted run logged after it, which the resumed run logs again, so no row is there twice.

        :param position: what ``checkpoint_position`` returned when the checkpoint was saved.
        :param epoch_end_row: for a checkpoint saved in a training epoch's end hooks, the row that epoch's end
            writes after them (``{"metrics": {...}, "step": n}``): the resumed run goes on with the next epoch and
            does not write it, so a logger that dropped it writes it here.
        """


def with_prefix(metrics: dict[str, Any], prefix: str, separator: str = "-") -> dict[str, Any]:
    """``metrics`` with ``prefix-`` before each name when a prefix was given (Lightning's join)."""
    if not prefix:
        return metrics
    return {f"{prefix}{separator}{key}": value for key, value in metrics.items()}


def rank_zero_experiment(getter: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Wrap a logger's ``experiment`` getter so that global ranks other than 0 get a ``NoOpExperiment``.

    Code run on every rank (``self.logger.experiment.add_image(...)`` in a step) then writes
    from rank 0 only, and the other ranks never open the experiment (Lightning's decorator of
    the same name).

    Example::

        class MyLogger(Logger):
            @property
            @rank_zero_experiment
            def experiment(self):
                return self._open_run()
    """

    @functools.wraps(getter)
    def experiment(self: Any) -> Any:
        if rank_zero_only.rank != 0:  # type: ignore[attr-defined]
            return NoOpExperiment()
        return getter(self)

    return experiment


class DummyLogger(Logger):
    """A logger that records nothing; ``fast_dev_run`` puts it in place of the real ones.

    Code that reaches for ``self.logger.experiment.add_image(...)`` keeps working: the
    experiment accepts any call and does nothing.
    """

    @property
    def experiment(self) -> "NoOpExperiment":
        """An object on which every method call does nothing."""
        return NoOpExperiment()

    @property
    def name(self) -> str:
        """Empty: it writes nowhere."""
        return ""

    @property
    def version(self) -> str:
        """Empty: it writes nowhere."""
        return ""


class NoOpExperiment:
    """Accepts any call and does nothing: the experiment of a logger on a rank that does not write."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None

    def __getitem__(self, index: Any) -> "NoOpExperiment":
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        pass
