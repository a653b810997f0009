"""Mixed precision: forward passes under ``torch.autocast``, parameters and optimizer state in fp32."""

import contextlib
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.optim import Optimizer

from framework.errors import MisconfigurationError
from framework.precision.base import Precision


class MixedPrecision(Precision):
    """Runs forward passes and step functions under ``torch.autocast`` in ``dtype``.

    Parameters, gradients and optimizer state stay in fp32; autocast picks, per operation,
    whether to compute in ``dtype`` (matrix multiplies, convolutions) or in fp32 (reductions,
    losses). Subclasses fix the dtype: ``BFloat16Mixed`` and ``Float16Mixed``.
    """

    #: The dtype autocast computes in.
    dtype: torch.dtype = torch.bfloat16
    #: Whether autocast reuses a weight's low-precision copy within one forward context (False under FSDP).
    autocast_cache: bool = True

    def autocast(self) -> contextlib.AbstractContextManager:
        """``torch.autocast`` for this runtime's device type and ``dtype``."""
        return torch.autocast(self.device.type, dtype=self.dtype, cache_enabled=self.autocast_cache)

    def unsupported_reason(self, device: torch.device) -> str | None:
        """Autocast exists for CPU, CUDA and MPS; bf16 needs a GPU generation that has it."""
        if device.type not in ("cpu", "cuda", "mps"):
            return f"torch.autocast has no {device.type!r} support. Use precision='32-true'."
        if device.type == "cuda" and self.dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported():
            return "this GPU has no bfloat16 support. Use precision='16-mixed'."
        return None


class BFloat16Mixed(MixedPrecision):
    """``precision="bf16-mixed"``: autocast to bfloat16. bf16 has fp32's range, so no loss scaling is needed.

    Example::

        Trainer(precision="bf16-mixed")
    """

    name = "bf16-mixed"
    dtype = torch.bfloat16


class Float16Mixed(MixedPrecision):
    """``precision="16-mixed"``: autocast to float16, with a ``torch.amp.GradScaler`` against underflow.

    The loss is multiplied by the scale before backward, so small fp16 gradients do not
    flush to zero; gradients are divided back (``unscale``) before clipping and stepping.
    A step whose gradients hold inf or nan is skipped (``optimizer_step`` returns False, so
    the LR scheduler does not step either) and the scale is halved. The scaler's state is
    part of ``state_dict()`` and so of every checkpoint. Works on CPU as well as CUDA.

    :param scaler: the ``torch.amp.GradScaler`` to use, as given; ``None`` (default): one made for the device
        (``GradScaler(device.type)``, default settings) when the Trainer or Runtime connects this precision.

    Example::

        Trainer(precision="16-mixed", gradient_clip_val=1.0)
    """

    name = "16-mixed"
    dtype = torch.float16

    def __init__(self, scaler: torch.amp.GradScaler | None = None) -> None:
        super().__init__()
        self._given_scaler = scaler
        self.scaler: torch.amp.GradScaler | None = scaler
        self._unscaled: set[int] = set()  # ids of optimizers unscaled since their last step
        self._update_due = False  # optimizers stepped since the scale was last updated
        self._taken: weakref.WeakKeyDictionary[Optimizer, list[int]] = weakref.WeakKeyDictionary()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for spawned ranks without the step counts, which belong to this process's optimizers."""
        return {**self.__dict__, "_taken": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._taken = weakref.WeakKeyDictionary()

    def connect(self, device: torch.device) -> None:
        """Check the device and make the GradScaler for it."""
        super().connect(device)
        if self._given_scaler is None:
            self.scaler = torch.amp.GradScaler(device.type)

    def unsupported_reason(self, device: torch.device) -> str | None:
        """Loss scaling needs ``torch.amp.GradScaler`` for the device (CPU and CUDA have it)."""
        if device.type not in ("cpu", "cuda"):
            return f"torch.amp.GradScaler has no {device.type!r} support. Use precision='bf16-mixed' or '32-true'."
        return super().unsupported_reason(device)

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Backward from ``loss * scale`` (after the update the last optimizer steps asked for)."""
        self.update_scale()
        self._require_scaler().scale(loss).backward(*args, **kwargs)

    def unscale(self, optimizer: Optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale (once per step, however often it is asked)."""
        if id(optimizer) not in self._unscaled:
            self._require_scaler().unscale_(optimizer)
            self._unscaled.add(id(optimizer))

    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any] | None = None, **kwargs: Any) -> bool:
        """Run ``closure`` (GradScaler cannot take one), then step unless the gradients hold inf/nan.

        Returns False when the step was skipped, known without waiting for the device: GradScaler
        read the flag already to decide (for a fused optimizer, which skips itself on the device,
        a ``StepOutcome`` reads the flag when it is first asked). The scale is updated once after all the
        optimizers of an iteration have stepped (``update_scale``, also run before the next
        backward), so two optimizers sharing one backward see the same scale, and
        gradient-accumulation micro-batches do not move it.

        :raises MisconfigurationError: where ``optimizer`` is a ``torch.optim.LBFGS``, whose closure runs several
            times a step.
        """
        if isinstance(optimizer, torch.optim.LBFGS):
            raise MisconfigurationError(
                "precision='16-mixed' cannot step torch.optim.LBFGS: LBFGS evaluates its closure several times per "
                "step, which loss scaling cannot follow. Use precision='bf16-mixed' or '32-true' with LBFGS."
            )
        scaler = self._require_scaler()
        if closure is not None and closure() is None:
            # training_step returned None: no backward ran, so there is nothing to check or step.
            self._unscaled.discard(id(optimizer))
            return True
        taken = self._steps_taken(optimizer)
        before = taken[0]
        scaler.step(optimizer, **kwargs)
        self._unscaled.discard(id(optimizer))
        self._update_due = True
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            # A fused optimizer takes the flag and skips itself on the device: the host learns whether it did
            # only by reading the flag, which waits for the device, so it is read only if asked.
            found_inf = scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
            return StepOutcome(list(found_inf.values()))
        # GradScaler read the flag already and called optimizer.step() only if it held no inf/nan.
        return taken[0] != before

    def _steps_taken(self, optimizer: Optimizer) -> list[int]:
        """How often ``optimizer.step()`` ran, counted by a step hook registered on first use."""
        taken = self._taken.get(optimizer)
        if taken is None:
            taken = self._taken[optimizer] = [0]

            def count(*_: Any) -> None:
                taken[0] += 1

            optimizer.register_step_post_hook(count)
        return taken

    def update_scale(self) -> None:
        """Update the scale once for the optimizer steps since the last update (halve it after inf/nan)."""
        if self._update_due:
            self._update_due = False
            self._require_scaler().update()

    def state_dict(self) -> dict[str, Any]:
        """The GradScaler's state: the scale, its growth/backoff settings and growth tracker."""
        self.update_scale()
        return self._require_scaler().state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the GradScaler's state from ``state_dict()``."""
        if state:
            self._require_scaler().load_state_dict(state)
            self._update_due = False

    def _require_scaler(self) -> torch.amp.GradScaler:
        if self.scaler is None:
            raise MisconfigurationError(
                "Float16Mixed is not connected to a device yet: pass it to Trainer(precision=...) or "
                "Runtime(precision=...), which connect it."
            )
        return self.scaler


class StepOutcome:
    """Whether a fused optimizer's step went through (truthy) or was skipped for inf/nan gradients.

    The optimizer skipped itself on the device; the flag is read, waiting for the device,
    the first time this is asked, and never where nothing asks (no LR scheduler due).
    """

    __slots__ = ("_flags", "_stepped")

    def __init__(self, flags: list[torch.Tensor]) -> None:
        self._flags = flags
        self._stepped: bool | None = None

    def __bool__(self) -> bool:
        if self._stepped is None:
            self._stepped = not any(flag.item() for flag in self._flags)
        return self._stepped

    def __repr__(self) -> str:
        return f"StepOutcome({'not read' if self._stepped is None else self._stepped})"
