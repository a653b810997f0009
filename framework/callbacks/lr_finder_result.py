"""``LRFinder``: what the learning-rate range test found (``Tuner.lr_find``, the ``LearningRateFinder`` callback).

In a module of its own because its reference page is under ``framework.tuner`` while the callback's is under
``framework.callbacks``: the docs' [source] pages link back to one package per module.
"""

import math
import warnings
from typing import Any

import torch

from framework.errors import require_package


class LRFinder:
    """What ``Tuner.lr_find`` found: ``results`` (``"lr"`` and the smoothed ``"loss"`` per step), ``suggestion()``
    and ``plot()``."""

    def __init__(self, mode: str, lr_min: float, lr_max: float, num_training: int) -> None:
        self.mode, self.lr_min, self.lr_max, self.num_training = mode, lr_min, lr_max, num_training
        self.results: dict[str, list[float]] = {"lr": [], "loss": []}
        self._optimal_idx: int | None = None

    def lr_at(self, step: int) -> float:
        """The learning rate of ``step`` (0 ... ``num_training``)."""
        fraction = step / self.num_training
        if self.mode == "exponential":
            return self.lr_min * (self.lr_max / self.lr_min) ** fraction
        return self.lr_min + (self.lr_max - self.lr_min) * fraction

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The learning rate where the loss falls fastest (the steepest negative slope), leaving out the first
        ``skip_begin`` and the last ``skip_end`` points; None (with a warning) when too few points are left."""
        points = list(zip(self.results["lr"], self.results["loss"], strict=True))
        points = points[skip_begin:len(points) - skip_end]
        finite = [(index + skip_begin, loss) for index, (_, loss) in enumerate(points) if math.isfinite(loss)]
        if len(finite) < 2:
            warnings.warn("Failed to compute suggestion for learning rate because there are not enough points. "
                          "Increase the loop iteration limits or the size of your dataset/dataloader.", stacklevel=2)
            self._optimal_idx = None
            return None
        slopes = torch.gradient(torch.tensor([loss for _, loss in finite]))[0]
        self._optimal_idx = finite[int(torch.argmin(slopes))][0]
        return self.results["lr"][self._optimal_idx]

    def plot(self, suggest: bool = False, show: bool = False, ax: Any = None) -> Any:
        """The loss against the learning rate (log scale in exponential mode), with the suggestion marked; needs
        matplotlib (``pip install "framework[matplotlib]"``)."""
        require_package("matplotlib", "LRFinder.plot()", extra="matplotlib")
        import matplotlib.pyplot as plt

        figure, ax = (plt.subplots() if ax is None else (ax.figure, ax))
        ax.plot(self.results["lr"], self.results["loss"])
        if self.mode == "exponential":
            ax.set_xscale("log")
        ax.set_xlabel("Learning rate")
        ax.set_ylabel("Loss")
        if suggest and self.suggestion() is not None:
            index = self._optimal_idx
            ax.plot(self.results["lr"][index], self.results["loss"][index], markersize=10, marker="o", color="red")
        if show:
            plt.show()
        return figure
