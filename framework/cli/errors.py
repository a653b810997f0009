"""The error a bad config or flag raises, and how its message names the key and where it came from."""

from __future__ import annotations

from framework.errors import MisconfigurationError

Key = tuple  # a path into a config: mapping keys and list indices


class ConfigError(MisconfigurationError):
    """A config file or a command-line flag cannot be used; the message says where it is and what to do."""


def dotted(key: Key) -> str:
    """``trainer.callbacks[0].init_args.monitor``: a key path as one writes it."""
    text = ""
    for part in key:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def placed(key: Key, origin: str | None) -> str:
    """``model.init_args.lr (config.yaml:7)``: a key and the file line or flag that gave it."""
    return f"{dotted(key)} ({origin})" if origin else dotted(key)
