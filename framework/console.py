"""What the framework tells the person at the console: the ``"framework"`` logger.

Messages go through ``logging.getLogger("framework")`` at INFO. Until the application
configures logging itself (a handler on the root logger), they are printed to stderr, as
Lightning does; once it has, they reach its handlers instead, and ``caplog`` sees them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings

LOGGER = logging.getLogger("framework")


class _UntilConfigured(logging.StreamHandler):
    """Prints a record only while the root logger has no handler (then the record propagates there)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger().handlers:
            self.stream = sys.stderr  # follow redirections (pytest's capsys, contextlib.redirect_stderr)
            with _above_progress_bars(self.stream):
                super().emit(record)


def _above_progress_bars(stream: object) -> contextlib.AbstractContextManager:
    """Where tqdm bars are on the screen, a message goes on its own line above them (not onto the end of a bar's
    line, where the terminal's cursor waits)."""
    bars = sys.modules.get("tqdm.std")
    if bars is None:  # no bar was ever drawn in this process
        return contextlib.nullcontext()
    return bars.tqdm.external_write_mode(file=stream)


if not any(isinstance(handler, _UntilConfigured) for handler in LOGGER.handlers):
    LOGGER.addHandler(_UntilConfigured())
if LOGGER.level == logging.NOTSET:
    LOGGER.setLevel(logging.INFO)


def info(message: str) -> None:
    """Tell the user ``message`` (callers in distributed runs call this on global rank 0 only)."""
    LOGGER.info(message)


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` shown at the first line outside the framework (the user's call), however deep it is."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level + 1)
