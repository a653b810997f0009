"""``ModelSummary``: a table of the model's layers and parameter counts, printed when fit starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn
from torch.nn.parameter import UninitializedParameter

from framework import console
from framework.callbacks.base import Callback
from framework.errors import MisconfigurationError, describe


@dataclass
class LayerRow:
    """One row of the summary: a submodule, its class and its parameters (its children's included)."""

    name: str
    type: str
    params: int
    training: bool


class Summary:
    """Layers down to ``max_depth`` (``-1``: all) with parameter counts, and the model's totals.

    Example::

        print(Summary(model, max_depth=2))
    """

    def __init__(self, module: nn.Module, max_depth: int = 1) -> None:
        self.rows = [
            LayerRow(name, type(sub).__name__, _count(sub.parameters()), sub.training)
            for name, sub in module.named_modules()
            if name and (max_depth == -1 or name.count(".") < max_depth)
        ]
        parameters = list(module.parameters())
        self.trainable_parameters = _count(p for p in parameters if p.requires_grad)
        self.total_parameters = _count(parameters)
        self.size_mb = sum(p.numel() * p.element_size() for p in parameters if not _lazy(p)) / 1e6
        modes = [sub.training for sub in module.modules()]
        self.training_modules, self.eval_modules = modes.count(True), modes.count(False)

    def __str__(self) -> str:
        header = ("", "Name", "Type", "Params", "Mode")
        cells = [(str(i), row.name, row.type, readable_count(row.params), "train" if row.training else "eval")
                 for i, row in enumerate(self.rows)]
        widths = [max(len(line[c]) for line in (header, *cells)) for c in range(len(header))]

        def render(line: tuple[str, ...]) -> str:
            return " | ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()

        rule = "-" * max(len(render(header)), 40)
        totals = [
            (readable_count(self.trainable_parameters), "Trainable params"),
            (readable_count(self.total_parameters - self.trainable_parameters), "Non-trainable params"),
            (readable_count(self.total_parameters), "Total params"),
            (f"{self.size_mb:,.3f}", "Total estimated model params size (MB)"),
            (str(self.training_modules), "Modules in train mode"),
            (str(self.eval_modules), "Modules in eval mode"),
        ]
        lines = [render(header), rule, *map(render, cells), rule] if cells else []
        lines += [f"{value:<10}{label}" for value, label in totals]
        return "\n".join(lines)


class ModelSummary(Callback):
    """Print the model's layers (to ``max_depth``, ``-1`` for all) and parameter totals when fit starts.

    Example::

        Trainer(callbacks=[ModelSummary(max_depth=2)])
    """

    def __init__(self, max_depth: int = 1) -> None:
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < -1:
            raise MisconfigurationError(f"ModelSummary(max_depth={describe(max_depth)}): accepted an int >= -1.")
        self.max_depth = max_depth

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        """Print the table on global rank 0 (nothing with ``max_depth=0``)."""
        if self.max_depth != 0 and trainer.is_global_zero:
            console.info("\n" + str(Summary(module, self.max_depth)))


def readable_count(number: int) -> str:
    """``1234`` -> ``"1.2 K"``, ``5_300_000`` -> ``"5.3 M"`` (three significant figures at most)."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if number >= size:
            value = number / size
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return str(number)


def _lazy(parameter: nn.Parameter) -> bool:
    return isinstance(parameter, UninitializedParameter)


def _count(parameters: Any) -> int:
    return sum(p.numel() for p in parameters if not _lazy(p))
