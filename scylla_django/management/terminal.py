"""Tables and progress bars for the commands: drawn with `rich` on a terminal when it is
installed (the `cli` extra), as plain aligned text otherwise (a pipe, a file, a log).
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from typing import IO, Any

BAR_WIDTH = 20


def has_rich() -> bool:
    """Whether `rich` can be imported."""
    return importlib.util.find_spec("rich") is not None


def rich_console(stream: Any) -> Any | None:
    """A `rich.console.Console` writing to `stream` when it is a terminal and rich is
    installed, else None (the caller writes plain text)."""
    isatty = getattr(stream, "isatty", None)
    if not has_rich() or isatty is None or not isatty():
        return None
    from rich.console import Console

    target: IO[str] = getattr(stream, "_out", stream)  # a command's OutputWrapper
    return Console(file=target, highlight=False)


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """`rows` under `headers`, in columns padded to their widest cell, trailing blanks cut."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = []
    for row in (headers, *rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return lines


def rich_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None
) -> Any:
    """A `rich.table.Table` of `rows` (text or rich renderables) under `headers`."""
    from rich.table import Table

    table = Table(title=title, header_style="bold", show_edge=False, pad_edge=False)
    for header in headers:
        table.add_column(header, no_wrap=header != "error")
    for row in rows:
        table.add_row(*row)
    return table


def text_bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """A progress bar in plain text: `[#########-----------]  45%`."""
    fraction = min(max(fraction, 0.0), 1.0)
    filled = math.floor(fraction * width)
    return f"[{'#' * filled}{'-' * (width - filled)}] {percent(fraction):>4}"


def percent(fraction: float) -> str:
    """A fraction as a whole percentage, rounded down so that only a finished task shows 100%."""
    return f"{math.floor(min(max(fraction, 0.0), 1.0) * 100)}%"
