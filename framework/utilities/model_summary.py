"""The model summary's table: each layer's parameters (and, given an example input, sizes and FLOPs) and the
model's totals. The ``ModelSummary`` callback prints it when fit starts; ``summarize(module)`` makes one at will.

Example::

    from framework.utilities.model_summary import summarize

    print(summarize(model, max_depth=2))
"""

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import UninitializedParameter

from framework.nested import move_to_device

UNKNOWN_SIZE = "?"


@dataclass
class LayerRow:
    """One row of the summary: a submodule, its class and its parameters (its children's included)."""

    name: str
    type: str
    params: int
    training: bool
    flops: int = 0
    in_size: Any = UNKNOWN_SIZE
    out_size: Any = UNKNOWN_SIZE


class Summary:
    """Layers down to ``max_depth`` (``-1``: all) with parameter counts, and the model's totals.

    With ``example_input`` (the Trainer passes ``module.example_input_array``) one forward
    pass, without gradients and in eval mode, measures each layer's FLOPs and input and
    output sizes, as Lightning's summary does.

    Example::

        print(Summary(model, max_depth=2))
    """

    def __init__(self, module: nn.Module, max_depth: int = 1, example_input: Any = None,
                 forward_context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> None:
        self.rows = [
            LayerRow(name, type(sub).__name__, _count(sub.parameters()), sub.training)
            for name, sub in module.named_modules()
            if name and (max_depth == -1 or name.count(".") < max_depth)
        ]
        parameters = list(module.parameters())
        self.trainable_parameters = _count(p for p in parameters if p.requires_grad)
        self.total_parameters = _count(parameters)
        self.size_mb = sum(p.numel() * p.element_size() for p in parameters if not _lazy(p)) / 1e6
        modes = [sub.training for sub in module.modules()][1:]  # the submodules, as Lightning counts them
        self.training_modules, self.eval_modules = modes.count(True), modes.count(False)
        self.has_example_input = example_input is not None
        self.total_flops = self._measure(module, example_input, max_depth, forward_context) if \
            self.has_example_input else 0

    def _measure(self, module: nn.Module, example_input: Any, max_depth: int,
                 forward_context: Callable[[], contextlib.AbstractContextManager]) -> int:
        """Run ``example_input`` through ``module`` once, recording each row's sizes and FLOPs; the total FLOPs."""
        from torch.utils.flop_counter import FlopCounterMode  # only with an example input, not at import

        rows = {row.name: row for row in self.rows}

        def recorder(row: LayerRow) -> Callable[..., None]:
            def record(layer: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
                row.in_size = _shape(inputs[0] if len(inputs) == 1 else list(inputs))
                row.out_size = _shape(output)
            return record

        handles = [sub.register_forward_hook(recorder(rows[name]))
                   for name, sub in module.named_modules() if name in rows]
        depth = 10_000 if max_depth == -1 else max_depth + 1
        counter = FlopCounterMode(display=False, depth=depth)
        modes = {sub: sub.training for sub in module.modules()}
        device = next((p.device for p in module.parameters()), torch.device("cpu"))
        try:
            module.eval()
            with torch.no_grad(), forward_context(), counter:
                batch = move_to_device(example_input, device)
                if isinstance(batch, (list, tuple)):
                    module(*batch)
                elif isinstance(batch, dict):
                    module(**batch)
                else:
                    module(batch)
        finally:
            for sub, training in modes.items():  # each submodule back as it was (a frozen BatchNorm stays eval)
                sub.training = training
            for handle in handles:
                handle.remove()
        counts = counter.get_flop_counts()
        for row in self.rows:
            row.flops = sum(counts.get(f"{type(module).__name__}.{row.name}", {}).values())
        return counter.get_total_flops()

    def header(self) -> tuple[str, ...]:
        """The table's column names (the sizes' only with an example input)."""
        sizes = ("In sizes", "Out sizes") if self.has_example_input else ()
        return ("", "Name", "Type", "Params", "Mode", "FLOPs", *sizes)

    def cells(self) -> list[tuple[str, ...]]:
        """One line of text cells per layer, under ``header()``."""
        lines = []
        for index, row in enumerate(self.rows):
            line = (str(index), row.name, row.type, readable_count(row.params), "train" if row.training else "eval",
                    readable_count(row.flops))
            lines.append((*line, str(row.in_size), str(row.out_size)) if self.has_example_input else line)
        return lines

    def totals(self) -> list[tuple[str, str]]:
        """``(value, label)`` for each total under the table, as Lightning lists them."""
        return [
            (readable_count(self.trainable_parameters), "Trainable params"),
            (readable_count(self.total_parameters - self.trainable_parameters), "Non-trainable params"),
            (readable_count(self.total_parameters), "Total params"),
            (f"{self.size_mb:,.3f}", "Total estimated model params size (MB)"),
            (str(self.training_modules), "Modules in train mode"),
            (str(self.eval_modules), "Modules in eval mode"),
            (readable_count(self.total_flops), "Total Flops"),
        ]

    def __str__(self) -> str:
        header, cells = self.header(), self.cells()
        widths = [max(len(line[c]) for line in (header, *cells)) for c in range(len(header))]

        def render(line: tuple[str, ...]) -> str:
            return " | ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))

        rule = "-" * (sum(widths) + 3 * (len(widths) + 1))  # Lightning's width, so logs compare line for line
        lines = [render(header), rule, *map(render, cells), rule] if cells else []
        lines += [f"{value:<10}{label}" for value, label in self.totals()]
        return "\n".join(lines)


def _shape(value: Any) -> Any:
    """A tensor's size as a list, nested for lists and tuples of them; ``"?"`` for anything else."""
    if isinstance(value, torch.Tensor):
        return list(value.shape)
    if isinstance(value, (list, tuple)):
        return [_shape(item) for item in value]
    return UNKNOWN_SIZE


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


class ModelSummary(Summary):
    """Lightning's ``lightning.pytorch.utilities.model_summary.ModelSummary``: the summary of ``model`` down to
    ``max_depth``, measured with ``model.example_input_array`` when it has one, with Lightning's attribute names.

    (The callback that prints it during fit is ``framework.callbacks.ModelSummary``.)
    """

    def __init__(self, model: nn.Module, max_depth: int = 1) -> None:
        self.max_depth = max_depth
        super().__init__(model, max_depth, getattr(model, "example_input_array", None))

    @property
    def layer_names(self) -> list[str]:
        return [row.name for row in self.rows]

    @property
    def layer_types(self) -> list[str]:
        return [row.type for row in self.rows]

    @property
    def param_nums(self) -> list[int]:
        return [row.params for row in self.rows]

    @property
    def in_sizes(self) -> list[Any]:
        return [row.in_size for row in self.rows]

    @property
    def out_sizes(self) -> list[Any]:
        return [row.out_size for row in self.rows]

    @property
    def training_modes(self) -> list[bool]:
        return [row.training for row in self.rows]

    @property
    def total_layer_params(self) -> int:
        return sum(self.param_nums)

    @property
    def model_size(self) -> float:
        """The parameters' size in megabytes."""
        return self.size_mb


def summarize(lightning_module: nn.Module, max_depth: int = 1) -> ModelSummary:
    """The ``ModelSummary`` of ``lightning_module`` (Lightning's ``summarize``)."""
    return ModelSummary(lightning_module, max_depth=max_depth)


#: Lightning's name for ``readable_count``.
get_human_readable_count = readable_count

__all__ = ["LayerRow", "ModelSummary", "Summary", "get_human_readable_count", "readable_count", "summarize"]
