"""``SpikeDetection``: stop training at a loss spike, noting the batches to skip when it is resumed."""

import json
import math
import os
from collections import deque
from typing import Any

from framework.callbacks.base import Callback
from framework.callbacks.monitor_mode import check_mode
from framework.checks import check_int
from framework.io.fs import write_bytes_atomic
from framework.protocols import TrainerLike


class TrainingSpikeException(RuntimeError):
    """Raised by ``SpikeDetection`` at a loss spike.

    :param batch_idx: the index of the batch where it happened, in the message and kept as ``batch_idx``.
    :param args: more arguments for ``RuntimeError``, after the message.
    """

    def __init__(self, batch_idx: int, *args: Any) -> None:
        super().__init__(f"Training spike detected in batch {batch_idx}", *args)
        self.batch_idx = batch_idx


class SpikeDetection(Callback):
    """Raise ``TrainingSpikeException`` when the training loss jumps away from its running mean over the last
    ``window`` batches (by at least ``atol`` and at least ``rtol`` times the mean, and not in the direction
    ``mode`` wants), or, with ``finite_only``, is not finite. Before raising, the spiking batch and the one before
    it are added to ``exclude_batches_path`` (a JSON list), for a resumed run to leave out. Any rank's spike
    stops every rank.

    Reading the loss costs one host read per step: a spike must be decided on the step it happens.

    :param mode: ``"min"`` (default): the loss should fall, so only a rise can be a spike; ``"max"``: the opposite.
    :param window: how many recent losses the running mean is taken over (default 10).
    :param warmup: batches whose ``batch_idx`` is below this are never judged (default 1).
    :param atol: the least distance from the mean that is a spike; ``None``: no absolute bound.
    :param rtol: the least distance from the mean, as a multiple of it, that is a spike (default 2.0); ``None``:
        no relative bound.
    :param exclude_batches_path: the JSON file (a path ending in ``.json``) or its directory;
        ``None`` (default): ``<default_root_dir>/skip_batches.json``.
    :param finite_only: True (default): a nan or infinite loss is a spike; False: it is not, and joins the mean.

    Example::

        Trainer(callbacks=[SpikeDetection(window=20, rtol=3.0)])
    """

    def __init__(self, mode: str = "min", window: int = 10, warmup: int = 1, atol: float | None = None,
                 rtol: float | None = 2.0, exclude_batches_path: str | os.PathLike | None = None,
                 finite_only: bool = True) -> None:
        check_mode("SpikeDetection", mode)
        check_int("SpikeDetection", "window", window, 1)
        self.mode, self.window, self.warmup, self.atol, self.rtol = mode, window, warmup, atol, rtol
        self.exclude_batches_path = None if exclude_batches_path is None else os.fspath(exclude_batches_path)
        self.finite_only = finite_only
        self.recent: deque[float] = deque(maxlen=window)
        self.last_val = 0.0
        self.bad_batches: list[int] = []

    def on_train_batch_end(self, trainer: TrainerLike, pl_module: Any,
                           outputs: Any, batch: Any, batch_idx: int) -> None:
        """Check the batch's loss (batches without one are passed over)."""
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is None:
            return
        value = float(loss)
        spike = batch_idx >= self.warmup and self._is_spike(value)
        if trainer.world_size > 1:
            spike = trainer.runtime.reduce_boolean_decision(spike, all=False)
        if spike:
            self._handle_spike(trainer, batch_idx)
        if math.isfinite(value) or not self.finite_only:
            self.recent.append(value)
            self.last_val = value

    def _is_spike(self, value: float) -> bool:
        if not math.isfinite(value):
            return self.finite_only
        if not self.recent:
            return False
        mean = sum(self.recent) / len(self.recent)
        change = value - self.last_val
        if (change <= 0) if self.mode == "min" else (change >= 0):  # an improvement is never a spike
            return False
        distance = abs(value - mean)
        return ((self.atol is None or distance >= abs(self.atol))
                and (self.rtol is None or distance >= abs(self.rtol * mean)))

    def _handle_spike(self, trainer: TrainerLike, batch_idx: int) -> None:
        self.bad_batches.extend([batch_idx - 1, batch_idx])
        if trainer.is_global_zero:
            path = self._path(trainer)
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            write_bytes_atomic(path, json.dumps(self.bad_batches, indent=4).encode())
        # every rank raises here alike: the first to raise gets the others stopped, so none may raise before the
        # file is whole (rank 1 raising first once stopped rank 0 in the middle of writing it)
        trainer.runtime.barrier("spike")
        raise TrainingSpikeException(batch_idx)

    def _path(self, trainer: TrainerLike) -> str:
        path = self.exclude_batches_path or trainer.default_root_dir
        return path if path.endswith(".json") else os.path.join(path, "skip_batches.json")

    def state_dict(self) -> dict[str, Any]:
        """The recent losses and the batches found bad."""
        return {"recent": list(self.recent), "last_val": self.last_val, "bad_batches": list(self.bad_batches)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        self.recent = deque(state_dict["recent"], maxlen=self.window)
        self.last_val = state_dict["last_val"]
        self.bad_batches = list(state_dict["bad_batches"])
