"""Turns what users type for ``precision=`` into a Precision object."""

from collections.abc import Callable

from framework.errors import MisconfigurationError, describe
from framework.precision.amp import BFloat16Mixed, Float16Mixed
from framework.precision.base import Precision
from framework.precision.true import BFloat16True, Float16True, Float64True

# Every spelling Lightning and Accelerate accept, mapped to our canonical name.
CANONICAL: dict[object, str] = {
    32: "32-true", "32": "32-true", "32-true": "32-true", "fp32": "32-true", "no": "32-true",
    64: "64-true", "64": "64-true", "64-true": "64-true",
    16: "16-mixed", "16": "16-mixed", "fp16": "16-mixed", "16-mixed": "16-mixed",
    "bf16": "bf16-mixed", "bf16-mixed": "bf16-mixed",
    "bf16-true": "bf16-true", "16-true": "16-true",
}

_BUILDERS: dict[str, Callable[[], Precision]] = {
    "32-true": Precision,
    "64-true": Float64True,
    "16-mixed": Float16Mixed,
    "bf16-mixed": BFloat16Mixed,
    "16-true": Float16True,
    "bf16-true": BFloat16True,
}


def register_precision(name: str, builder: Callable[[], Precision], aliases: tuple[str, ...] = ()) -> None:
    """Make ``precision=name`` (and each alias, in any case) build ``builder()``: a new name, or a name that
    exists (its builder replaced), as ``register_strategy`` does for strategies. The Trainer, the command line
    (``--trainer.precision``) and the Accelerator (``mixed_precision=``) accept it from then on.

    Example::

        register_precision("bf16-fast", lambda: MyBFloat16Mixed(), aliases=("bf16f",))
        Trainer(precision="bf16-fast")

    :param name: the name users pass; the builder's precision should report it as its ``name``.
    :param builder: makes a new ``Precision`` for each run.
    :param aliases: other spellings of ``name``.
    :raises MisconfigurationError: where ``name`` or an alias is not a non-empty string.
    """
    for spelling in (name, *aliases):
        if not isinstance(spelling, str) or not spelling:
            raise MisconfigurationError(f"register_precision: the name {describe(spelling)} must be a non-empty str.")
    canonical = CANONICAL.get(name.lower(), name.lower())
    _BUILDERS[canonical] = builder
    for spelling in (name, *aliases):
        CANONICAL[spelling.lower()] = canonical


def added_names() -> list[str]:
    """The names ``register_precision`` added (not Lightning's or Accelerate's own spellings)."""
    return [name for name in _BUILDERS if name not in _BUILT_IN]


_BUILT_IN = frozenset(_BUILDERS)


def resolve_precision(precision: object) -> Precision:
    """A Precision instance for ``precision`` (an instance, or any accepted spelling).

    :raises MisconfigurationError: where ``precision`` is neither a ``Precision`` nor an accepted spelling, or names a
        mode this version does not have.
    """
    if isinstance(precision, Precision):
        return precision
    key = precision.lower() if isinstance(precision, str) else precision
    canonical = CANONICAL.get(key) if isinstance(key, (int, str)) and not isinstance(key, bool) else None
    if canonical is None:
        accepted = ", ".join(repr(k) for k in CANONICAL)
        raise MisconfigurationError(
            f"precision={describe(precision)} is not a precision mode. Accepted: {accepted}, or a Precision instance."
        )
    builder = _BUILDERS.get(canonical)
    if builder is None:
        available = ", ".join(repr(k) for k in sorted(_BUILDERS))
        raise MisconfigurationError(
            f"precision={precision!r} ({canonical}) is not available in this version of framework; "
            f"available: {available}."
        )
    return builder()
