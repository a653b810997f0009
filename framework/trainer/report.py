"""The table ``validate`` and ``test`` print when ``verbose=True``."""

from __future__ import annotations

import shutil


def format_results(title: str, results: list[dict[str, float]]) -> str:
    """One row per metric, one column per dataloader; empty when nothing was logged."""
    names = sorted({name for metrics in results for name in metrics})
    if not names:
        return ""
    width = shutil.get_terminal_size((120, 20)).columns
    column = 25
    rule = "─" * width
    header = f"{title} metric".center(column) + "".join(f"DataLoader {i}".center(column) for i in range(len(results)))
    lines = [rule, header.rstrip(), rule]
    for name in names:
        cells = [_cell(metrics.get(name)) for metrics in results]
        lines.append((name.center(column) + "".join(cell.center(column) for cell in cells)).rstrip())
    lines.append(rule)
    return "\n".join(lines)


def print_results(title: str, results: list[dict[str, float]]) -> None:
    """Print the ``format_results`` table, if anything was logged."""
    table = format_results(title, results)
    if table:
        print(table)


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"
