"""Parses ``accelerator=`` and ``devices=`` into a device type and a list of device indices."""

from __future__ import annotations

import os

import torch

from framework.checks import is_int
from framework.errors import MisconfigurationError, describe

ACCELERATORS = ("auto", "cpu", "cuda", "gpu", "mps")


def resolve_accelerator(accelerator: object) -> str:
    """``"cpu"``, ``"cuda"`` or ``"mps"`` for what the user typed ("auto" picks the best available), or for an
    accelerator object by its ``accelerator_name`` (Lightning's ``CUDAAccelerator()``, ``framework.as_lightning``)."""
    accelerator = getattr(type(accelerator), "accelerator_name", accelerator)
    if not isinstance(accelerator, str) or accelerator.lower() not in ACCELERATORS:
        raise MisconfigurationError(
            f"accelerator={describe(accelerator)} is not supported. Accepted: {', '.join(map(repr, ACCELERATORS))}."
        )
    name = accelerator.lower()
    if name == "gpu":
        name = "cuda"
    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if _mps_available():
            return "mps"
        return "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise MisconfigurationError(
            f"accelerator={accelerator!r} was asked for, but torch.cuda.is_available() is False on this machine. "
            "Use accelerator='cpu' or 'auto' to run on what is here."
        )
    if name == "mps" and not _mps_available():
        raise MisconfigurationError(
            f"accelerator={accelerator!r} was asked for, but MPS is not available. Use accelerator='cpu' or 'auto'."
        )
    return name


def resolve_devices(devices: object, accelerator: str) -> list[int]:
    """The device indices to use: ``[0]`` for one device, ``[0, 1, 2, 3]`` for ``devices=4``.

    Accepted: "auto", a positive int, -1 (every device), a list of indices, or a string
    such as "2", "-1" or "0,1". On CPU the indices stand for processes.
    """
    available = _device_count(accelerator)
    value = devices
    if isinstance(value, str) and value != "auto":
        text = value.strip()
        try:
            value = [int(part) for part in text.split(",") if part.strip()] if "," in text else int(text)
        except ValueError:
            value = devices
    if value == "auto":
        return list(range(available)) if accelerator == "cuda" else [0]
    if is_int(value):
        if value == -1:
            return list(range(available))
        if value > 0:
            if accelerator != "cpu" and value > available:
                raise MisconfigurationError(
                    f"devices={devices!r} asks for {value} {accelerator} devices but {available} are available."
                )
            return list(range(value))
    if (isinstance(value, (list, tuple)) and value and len(set(value)) == len(value)
            and all(is_int(i) and i >= 0 for i in value)):
        if accelerator != "cpu" and max(value) >= available:
            raise MisconfigurationError(
                f"devices={devices!r} names {accelerator} device {max(value)}, but only {available} are available."
            )
        return list(value)
    raise MisconfigurationError(
        f"devices={describe(devices)} is not understood. Accepted: 'auto', a positive int, -1 (all), "
        "a list of distinct device indices such as [0, 1], or a string such as '2' or '0,1'."
    )


def pinned(requested: torch.device, accelerator: str, device_ids: list[int]) -> list[int]:
    """The device ids for a strategy pinned to ``requested`` (``SingleDeviceStrategy("cuda:1")``); a
    ``MisconfigurationError`` when its type is not the accelerator's."""
    if requested.type != accelerator:
        raise MisconfigurationError(
            f"The strategy was given device {str(requested)!r}, but the accelerator is {accelerator!r}. Give the "
            f"Trainer accelerator={requested.type!r}, or the strategy a {accelerator} device."
        )
    return [requested.index] if requested.index is not None else device_ids


def device_for(accelerator: str, index: int) -> torch.device:
    """The ``torch.device`` for ``accelerator`` and device ``index`` (the index is unused on CPU and MPS)."""
    if accelerator == "cpu":
        return torch.device("cpu")
    if accelerator == "mps":
        return torch.device("mps")
    return torch.device(accelerator, index)


def _device_count(accelerator: str) -> int:
    if accelerator == "cuda":
        return torch.cuda.device_count()
    if accelerator == "mps":
        return 1
    return os.cpu_count() or 1


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())
