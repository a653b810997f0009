"""Lightning's precision plugins, for ``Trainer(plugins=[...])``: each builds the framework precision of the same
name (``precision=`` takes the same choices as strings).

====================================================  ============================
Lightning's plugin                                    ``precision=``
====================================================  ============================
``Precision()``                                       ``"32-true"``
``MixedPrecision("16-mixed", "cuda", scaler=None)``   ``"16-mixed"`` (its scaler)
``MixedPrecision("bf16-mixed", "cuda")``              ``"bf16-mixed"``
``HalfPrecision("bf16-true")``, ``("16-true")``       ``"bf16-true"``, ``"16-true"``
``DoublePrecision()``                                 ``"64-true"``
====================================================  ============================

``BitsandbytesPrecision`` (layers quantised by bitsandbytes) is not provided: building one says so.

Example::

    Trainer(plugins=[MixedPrecision("16-mixed", "cuda")])      # as Trainer(precision="16-mixed")
"""

from __future__ import annotations

from typing import Any

from framework.errors import MisconfigurationError, NotProvidedError, describe
from framework.precision.amp import BFloat16Mixed, Float16Mixed
from framework.precision.amp import MixedPrecision as _OurMixedPrecision
from framework.precision.base import Precision
from framework.precision.true import BFloat16True, Float16True, Float64True

__all__ = ["BitsandbytesPrecision", "DoublePrecision", "HalfPrecision", "MixedPrecision", "Precision"]


class _BuildsFrameworkPrecision(type):
    """A Lightning plugin class whose call builds framework's precision object; ``isinstance`` holds for what it
    builds (``isinstance(trainer.precision_plugin, MixedPrecision)``)."""

    _builds: type | tuple[type, ...]

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, cls._builds)

    def __subclasscheck__(cls, subclass: type) -> bool:
        builds = isinstance(subclass, type) and issubclass(subclass, cls._builds)
        return builds or type.__subclasscheck__(cls, subclass)


class MixedPrecision(metaclass=_BuildsFrameworkPrecision):
    """Autocast to float16 (with a ``GradScaler``: ``scaler``, or one made for the device) or bfloat16.
    ``device`` is where autocast runs; framework takes it from the Trainer's accelerator."""

    _builds = _OurMixedPrecision

    def __new__(  # type: ignore[misc]
        cls, precision: Any, device: str = "cuda", scaler: Any = None
    ) -> _OurMixedPrecision:
        if precision in ("16-mixed", "16", 16):
            return Float16Mixed(scaler)
        if precision in ("bf16-mixed", "bf16"):
            if scaler is not None:
                raise MisconfigurationError(
                    f"MixedPrecision(precision={precision!r}, scaler={describe(scaler)}): bfloat16 needs no loss "
                    "scaling; pass scaler=None."
                )
            return BFloat16Mixed()
        raise MisconfigurationError(
            f"MixedPrecision(precision={describe(precision)}): accepted are '16-mixed' and 'bf16-mixed'."
        )


class HalfPrecision(metaclass=_BuildsFrameworkPrecision):
    """Everything in bfloat16 (``"bf16-true"``) or float16 (``"16-true"``)."""

    _builds = (Float16True, BFloat16True)

    def __new__(cls, precision: Any = "16-true") -> Float16True | BFloat16True:  # type: ignore[misc]
        if precision in ("16-true", "16", 16):
            return Float16True()
        if precision == "bf16-true":
            return BFloat16True()
        raise MisconfigurationError(f"HalfPrecision(precision={describe(precision)}): accepted are '16-true' and "
                                    "'bf16-true'.")


class DoublePrecision(metaclass=_BuildsFrameworkPrecision):
    """Everything in float64."""

    _builds = Float64True

    def __new__(cls) -> Float64True:  # type: ignore[misc]
        return Float64True()


class BitsandbytesPrecision:
    """Not provided: layers quantised through bitsandbytes have no counterpart in framework.

    :raises NotProvidedError: always: framework does not quantise layers with bitsandbytes.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotProvidedError(
            "BitsandbytesPrecision (layers quantised by bitsandbytes) is not provided by framework. Train in "
            "precision='bf16-true' or '16-mixed', or quantise the model yourself before fit (its layers are "
            "trained as they are)."
        )
