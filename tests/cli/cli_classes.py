"""Classes the command-line tests name by ``class_path`` (``tests.cli.cli_classes.Net``)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from torch import nn
from torch.utils.data import DataLoader

import framework
from tests.helpers import Regressor, regression_data


class Net(Regressor):
    """A regressor with arguments of the types a config gives: float, int, str, Optional, list, Literal."""

    def __init__(self, lr: float = 0.05, hidden: int = 4, name: str = "net", dropout: float | None = None,
                 sizes: list[int] = (1, 2), mode: Literal["sum", "mean"] = "mean", shape: tuple[int, int] = (2, 3),
                 frozen: bool = False) -> None:
        super().__init__(lr=lr)
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.Linear(hidden, 1))


class WideNet(Net):
    """A subclass, for ``class_path`` naming one under a fixed ``ModelClass``."""

    def __init__(self, width: int = 8, lr: float = 0.05) -> None:
        super().__init__(lr=lr, hidden=width)


class NeedsWidth(Net):
    """A Module with a required argument."""

    def __init__(self, width: int) -> None:
        super().__init__(hidden=width)


class Kwargs(Net):
    """A Module passing ``**kwargs`` on: its extra arguments are not checked, only read as YAML."""

    def __init__(self, scale: float = 1.0, **kwargs) -> None:
        super().__init__(lr=kwargs.get("lr", 0.05))
        self.scale = scale
        self.extra = kwargs


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Schedule:
    warmup: int = 0
    peak: float = 1.0


class Options(Net):
    """A Module whose arguments are the less common kinds: Enum, callable, dataclass, typed containers."""

    def __init__(self, color: Color = Color.RED, activation: Callable = nn.functional.relu,
                 schedule: Schedule | None = None, paths: list[Path] = (), pairs: list[tuple[int, int]] = (),
                 tags: set[str] = frozenset(), bits: Literal["16", "32"] = "32", note: str = "",
                 shade: Color | str = "plain", scale: float | int = 1,
                 helper: framework.Callback | None = None, label: str = None, limits: dict = None,
                 stages: Schedule = Schedule(warmup=1, peak=0.5)) -> None:  # noqa: B008 - a default to print
        super().__init__()
        self.options = dict(color=color, activation=activation, schedule=schedule, paths=paths, pairs=pairs,
                            tags=tags, bits=bits, note=note, shade=shade, scale=scale, helper=helper, label=label,
                            limits=limits, stages=stages)


class Data(framework.DataModule):
    """32 regression samples, shuffled for training."""

    def __init__(self, batch_size: int = 8, n: int = 32) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.n = n

    def train_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(self.n), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(regression_data(self.n, seed=1), batch_size=self.batch_size)

    test_dataloader = predict_dataloader = val_dataloader


class NotAModule(nn.Module):
    """A plain torch module: ``model.class_path`` must refuse it."""
