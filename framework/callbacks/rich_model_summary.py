"""``RichModelSummary``: the model summary as a rich table (``pip install rich``)."""

from __future__ import annotations

import importlib.util
from typing import Any

from framework.callbacks.model_summary import ModelSummary, Summary, readable_count
from framework.errors import MisconfigurationError


class RichModelSummary(ModelSummary):
    """``ModelSummary`` drawn with rich: the layers as a table (``header_style`` for its header) and the totals
    below it.

    Example::

        Trainer(callbacks=[RichModelSummary(max_depth=2, header_style="bold magenta")])
    """

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        if importlib.util.find_spec("rich") is None:
            raise MisconfigurationError("RichModelSummary draws with rich, which is not installed: pip install rich.")
        super().__init__(max_depth=max_depth, **summarize_kwargs)

    def summarize(self, summary: Summary) -> None:
        """Print the table and the totals with rich."""
        from rich.console import Console
        from rich.table import Table

        table = Table(header_style=self._summarize_kwargs.get("header_style", "bold magenta"))
        columns = ["", "Name", "Type", "Params", "Mode", "FLOPs"]
        if summary.has_example_input:
            columns += ["In sizes", "Out sizes"]
        for column in columns:
            table.add_column(column)
        for index, row in enumerate(summary.rows):
            cells = [str(index), row.name, row.type, readable_count(row.params), "train" if row.training else "eval",
                     readable_count(row.flops)]
            if summary.has_example_input:
                cells += [str(row.in_size), str(row.out_size)]
            table.add_row(*cells)
        totals = Table.grid(expand=False)
        totals.add_column()
        totals.add_column()
        for value, label in (
                (readable_count(summary.trainable_parameters), "Trainable params"),
                (readable_count(summary.total_parameters - summary.trainable_parameters), "Non-trainable params"),
                (readable_count(summary.total_parameters), "Total params"),
                (f"{summary.size_mb:,.3f}", "Total estimated model params size (MB)"),
                (str(summary.training_modules), "Modules in train mode"),
                (str(summary.eval_modules), "Modules in eval mode"),
                (readable_count(summary.total_flops), "Total Flops")):
            totals.add_row(f"[bold]{value}[/bold]", label)
        console = Console()
        console.print(table)
        console.print(totals)
