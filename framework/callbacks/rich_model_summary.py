"""``RichModelSummary``: the model summary as a rich table (``pip install rich``)."""

from typing import Any

from framework.callbacks.model_summary import ModelSummary, Summary
from framework.errors import require_package


class RichModelSummary(ModelSummary):
    """``ModelSummary`` drawn with rich: the layers as a table (``header_style`` for its header) and the totals
    below it. Needs ``rich``.

    :param max_depth: how deep to list submodules (default 1: the model's children); -1 lists all, 0 prints
        nothing.
    :param summarize_kwargs: ``header_style``: the rich style of the table's header (default ``"bold magenta"``);
        other keys are ignored.

    Example::

        Trainer(callbacks=[RichModelSummary(max_depth=2, header_style="bold magenta")])
    """

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        require_package("rich", "RichModelSummary", extra="rich")
        super().__init__(max_depth=max_depth, **summarize_kwargs)

    def summarize(self, summary: Summary) -> None:
        """Print the table and the totals with rich."""
        from rich.console import Console
        from rich.table import Table

        table = Table(header_style=self._summarize_kwargs.get("header_style", "bold magenta"))
        for column in summary.header():
            table.add_column(column)
        for cells in summary.cells():
            table.add_row(*cells)
        totals = Table.grid(expand=False)
        totals.add_column()
        totals.add_column()
        for value, label in summary.totals():
            totals.add_row(f"[bold]{value}[/bold]", label)
        console = Console()
        console.print(table)
        console.print(totals)
