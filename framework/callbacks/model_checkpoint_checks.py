"""The checks of ``ModelCheckpoint``'s arguments: a clear error naming the argument and what it accepts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from framework.callbacks.monitor_mode import check_mode
from framework.checks import check_bool, check_int
from framework.errors import MisconfigurationError, describe
from framework.io.fs import filesystem, is_local

_OWNER = "ModelCheckpoint"


def check_save_last(save_last: Any) -> None:
    """Refuse a ``save_last`` other than True, False, None or "link"."""
    if save_last not in (None, True, False, "link"):
        raise MisconfigurationError(
            f"ModelCheckpoint(save_last={describe(save_last)}): accepted True, False, None or 'link'."
        )


def check_link_target(save_last: Any, dirpath: str) -> None:
    """Refuse ``save_last="link"`` where ``dirpath`` (known once set up: it may be the logger's) is not local."""
    if save_last == "link" and not is_local(filesystem(dirpath)[0]):
        raise MisconfigurationError(
            f"ModelCheckpoint(save_last='link') is only supported for local file paths, got dirpath={dirpath!r}: a "
            "symbolic link needs this machine's file system. Use save_last=True there (a copy)."
        )


def check_arguments(monitor: Any, save_top_k: Any, mode: Any, every_n_train_steps: Any, every_n_epochs: Any,
                     train_time_interval: Any, async_save: Any) -> None:
    """Refuse settings ModelCheckpoint cannot honour, naming the argument and what it accepts."""
    check_bool(_OWNER, "async_save", async_save)
    check_int(_OWNER, "save_top_k", save_top_k, -1, meaning=" (-1 keeps every file, 0 none)")
    check_mode(_OWNER, mode)
    if monitor is None and save_top_k not in (-1, 0, 1):
        raise MisconfigurationError(
            f"ModelCheckpoint(save_top_k={save_top_k}, monitor=None): without a monitored metric there is no "
            "ranking to keep the top k by; set monitor= or use save_top_k in (-1, 0, 1)."
        )
    for name, value in (("every_n_train_steps", every_n_train_steps), ("every_n_epochs", every_n_epochs)):
        check_int(_OWNER, name, value, 0, none_means=None)
    if train_time_interval is not None:
        if not isinstance(train_time_interval, timedelta):
            raise MisconfigurationError(
                f"ModelCheckpoint(train_time_interval={describe(train_time_interval)}): accepted is a "
                "datetime.timedelta."
            )
        if every_n_train_steps or every_n_epochs:
            raise MisconfigurationError(
                "ModelCheckpoint: every_n_train_steps, every_n_epochs and train_time_interval are alternatives; "
                "give one of them."
            )
    elif every_n_train_steps and every_n_epochs:
        raise MisconfigurationError(
            "ModelCheckpoint: every_n_train_steps, every_n_epochs and train_time_interval are alternatives; "
            "give one of them."
        )

