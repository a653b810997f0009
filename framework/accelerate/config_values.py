"""The checks of Accelerate config values: each takes what a YAML file, a flag or an environment variable gives
(``true``, ``"yes"``, ``2``, ``"2"``, ``1e8``) and returns the value in one spelling, or raises :class:`Refused`
saying what is accepted. Accelerate's own reader is as lenient about spellings (``str_to_bool``, upper-cased
names). :mod:`framework.accelerate.config_keys` says which check each key takes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from framework.precision.registry import added_names
from framework.strategies.fsdp_options import SHARDING_STRATEGIES

Check = Callable[[Any], Any]

_TRUE = ("true", "yes", "y", "on", "1")
_FALSE = ("false", "no", "n", "off", "0")
# Accelerate spells torch's _HYBRID_SHARD_ZERO2 without the underscore, and numbers the strategies from 1.
SHARDING = tuple(name.lstrip("_") for name in SHARDING_STRATEGIES)


#: Accelerate's ``mixed_precision`` values, each with the precision it runs as (a ``Trainer(precision=)`` name).
MIXED_PRECISIONS = {"no": "32-true", "fp16": "16-mixed", "bf16": "bf16-mixed"}


def mixed_precisions() -> dict[str, str]:
    """The ``mixed_precision`` values an Accelerator takes now: Accelerate's, and each name ``register_precision``
    added, which runs as itself."""
    return {**MIXED_PRECISIONS, **{name: name for name in added_names()}}


class Refused(ValueError):
    """A value a key cannot take; the message names the value and what is accepted."""


def choice(*accepted: str, lower: bool = False, refused: Mapping[str, str] | None = None) -> Check:
    """A check for one of ``accepted`` (matched without regard to case; returned as spelled in ``accepted``).
    ``refused`` maps values known but not supported to the reason told."""
    refused = refused or {}

    def check(value: Any) -> str:
        if value is False and "NO" in (name.upper() for name in accepted):
            value = "no"  # YAML 1.1 reads an unquoted `no` as false
        spelled = str(value).strip()
        canonical = spelled.lower() if lower else spelled.upper()
        if isinstance(value, (str, int)) and not isinstance(value, bool) and canonical in accepted:
            return canonical
        reason = refused.get(spelled.upper(), "")
        raise Refused(f"{value!r} is not supported{reason}; accepted: {', '.join(accepted)}.")

    check.accepted = accepted  # type: ignore[attr-defined]  # for help texts: choices()
    return check


def choices(check: Check) -> str:
    """``{A,B,C}``: the values a ``choice`` check accepts, as a help text's metavar."""
    return "{" + ",".join(check.accepted) + "}"  # type: ignore[attr-defined]


def whole(minimum: int, maximum: int | None = None, also: tuple[int, ...] = ()) -> Check:
    """A check for a whole number from ``minimum`` to ``maximum`` (or one of ``also``); ``"2"`` and ``1e8`` count."""

    def check(value: Any) -> int:
        number = _as_int(value)
        if number is not None and (number in also or (number >= minimum and (maximum is None or number <= maximum))):
            return number
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
        raise Refused(f"{value!r} is not accepted; accepted: a whole number {bounds}.")

    return check


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value) if any(mark in value for mark in ".eE") else int(value)
        except ValueError:
            return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) else None


def boolean(value: Any) -> bool:
    """``true``/``false`` (also ``yes``/``no``, ``1``/``0``, in any case, as Accelerate's ``str_to_bool``)."""
    if isinstance(value, bool):
        return value
    spelled = str(value).strip().lower()
    if isinstance(value, (str, int)) and spelled in _TRUE + _FALSE:
        return spelled in _TRUE
    raise Refused(f"{value!r} is not accepted; accepted: true, false.")


def number(value: Any) -> float:
    """A number not below 0 (``1``, ``"1.0"``, ``0.5``)."""
    try:
        converted = float(value)
    except (TypeError, ValueError):
        converted = -1.0
    if isinstance(value, bool) or not converted >= 0:
        raise Refused(f"{value!r} is not a number of 0 or more.")
    return converted


def text(value: Any) -> str:
    """A non-empty string (an address, a name)."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise Refused(f"{value!r} is not accepted; accepted: a non-empty string.")


def class_names(value: Any) -> str:
    """Layer class names, comma-separated as Accelerate writes them (a YAML list is joined)."""
    if isinstance(value, list) and value and all(isinstance(name, str) and name.strip() for name in value):
        return ",".join(name.strip() for name in value)
    if isinstance(value, str) and all(name.strip() for name in value.split(",")):
        return ",".join(name.strip() for name in value.split(","))
    raise Refused(f"{value!r} is not accepted; accepted: class names, comma-separated (BertLayer,BertEmbeddings).")


def gpu_ids(value: Any) -> str:
    """``all`` or GPU indices, comma-separated (``0,1``), as ``CUDA_VISIBLE_DEVICES`` takes them."""
    if isinstance(value, list):
        value = ",".join(str(item) for item in value)
    spelled = str(value).strip().replace(" ", "")
    if spelled.lower() == "all":
        return "all"
    if not isinstance(value, bool) and spelled and all(part.isdigit() for part in spelled.split(",")):
        return spelled
    raise Refused(f"{value!r} is not accepted; accepted: all, or GPU indices comma-separated (0,1).")


def sharding_strategy(value: Any) -> str:
    """FSDP version 1's strategy by name, or by Accelerate's number for it (1 FULL_SHARD ... 5 HYBRID_SHARD_ZERO2;
    torch's enum spelling ``_HYBRID_SHARD_ZERO2`` too)."""
    number = _as_int(value)
    if number is not None and 1 <= number <= len(SHARDING):
        value = SHARDING[number - 1]
    return choice(*SHARDING)(_without_leading_underscore(value))


def reshard(value: Any) -> bool | str:
    """``fsdp_reshard_after_forward``: true/false (FSDP version 2), or a sharding strategy name (version 1,
    where ``accelerate config`` writes the strategy under this key)."""
    try:
        return boolean(value)
    except Refused:
        pass
    try:
        return choice(*SHARDING)(_without_leading_underscore(value))
    except Refused as refused:
        raise Refused(f"{value!r} is not accepted; accepted: true, false (fsdp_version 2), "
                      f"{', '.join(SHARDING)} (fsdp_version 1).") from refused


def _without_leading_underscore(value: Any) -> Any:
    return value.strip().lstrip("_") if isinstance(value, str) else value


def empty_section(value: Any) -> bool:
    """Whether a config section holds nothing (absent, null or ``{}``), as ``accelerate config`` leaves unused ones."""
    return value is None or value == {}
