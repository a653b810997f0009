"""The Logger base: where logged metrics and hyperparameters go."""

from __future__ import annotations

from typing import Any


class Logger:
    """Receives metrics as Python floats at the steps the Trainer decides.

    Subclasses implement ``log_metrics`` and usually ``log_hyperparams``; ``save`` and
    ``finalize`` flush. Only rank 0 logs.

    Example::

        class PrintLogger(Logger):
            def log_metrics(self, metrics, step):
                print(step, metrics)
    """

    @property
    def name(self) -> str | None:
        return type(self).__name__

    @property
    def version(self) -> int | str | None:
        return None

    @property
    def save_dir(self) -> str | None:
        return None

    @property
    def log_dir(self) -> str | None:
        return None

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Record ``metrics`` at ``step``."""

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        """Record the run's hyperparameters."""

    def save(self) -> None:
        """Flush what is buffered."""

    def finalize(self, status: str) -> None:
        """The run ended with ``status`` ("success", "failed" or "interrupted")."""
        self.save()
