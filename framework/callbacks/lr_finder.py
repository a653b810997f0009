"""``LearningRateFinder`` under Lightning's module path (``lightning.pytorch.callbacks.lr_finder``): it is the tuner's
(``framework.tuner.finder_callbacks``), loaded from there when first asked for."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "LearningRateFinder":
        from framework.tuner import finder_callbacks

        return finder_callbacks.LearningRateFinder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
