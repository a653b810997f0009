"""``get_logger``: a logger for scripts run on several processes, which logs on the main process only unless a
call says otherwise."""

from __future__ import annotations

import logging
import os
from typing import Any

from framework.accelerate.utils.shared_state import current_runtime


class MultiProcessAdapter(logging.LoggerAdapter):
    """A logger whose calls take ``main_process_only`` (default True: log on the main process only) and
    ``in_order`` (every process logs, one after another in process order)."""

    def __init__(self, logger: logging.Logger, extra: Any = None) -> None:
        super().__init__(logger, extra or {})
        self._warned: set[Any] = set()

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        main_process_only = kwargs.pop("main_process_only", True)
        in_order = kwargs.pop("in_order", False)
        kwargs.setdefault("stacklevel", 2)
        if not self.isEnabledFor(level):
            return
        message, kwargs = self.process(msg, kwargs)
        runtime = current_runtime()
        if in_order:
            for index in range(runtime.world_size):
                if index == runtime.global_rank:
                    self.logger.log(level, message, *args, **kwargs)
                runtime.barrier("in_order")
        elif not main_process_only or runtime.global_rank == 0:
            self.logger.log(level, message, *args, **kwargs)

    def warning_once(self, *args: Any, **kwargs: Any) -> None:
        """``warning``, only the first time these arguments come."""
        key = (args, tuple(sorted(kwargs.items())))
        if key not in self._warned:
            self._warned.add(key)
            self.warning(*args, **kwargs)


def get_logger(name: str, log_level: str | None = None) -> MultiProcessAdapter:
    """The logger ``name`` (``logging.getLogger``) wrapped so that it logs on the main process only unless a call
    passes ``main_process_only=False`` or ``in_order=True``; ``log_level`` (else ``ACCELERATE_LOG_LEVEL``) sets its
    level.

    Example::

        logger = get_logger(__name__)
        logger.info("training starts")                          # once, on the main process
        logger.info("my shard", main_process_only=False)       # on every process
    """
    log_level = log_level if log_level is not None else os.environ.get("ACCELERATE_LOG_LEVEL")
    logger = logging.getLogger(name)
    if log_level is not None:
        logger.setLevel(log_level.upper())
        logger.root.setLevel(log_level.upper())
    return MultiProcessAdapter(logger)
