"""The one table renderer of the command line (dumps, tune show, comms report, asm --list).

Cells are never cut: on a terminal a long cell (a kernel name, a file path) wraps inside its
column to the terminal's width; written to a pipe or a file, each row stays on one line, so
``grep`` and ``diff`` see whole rows. ``COLUMNS`` sets the width either way. Rendering is rich's.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from typing import Any, Iterable, Sequence

_UNLIMITED = 10_000  # a pipe: as wide as the widest row


def output_width() -> int:
    """Columns to wrap to: ``$COLUMNS``, else the terminal's, else no limit (a pipe or a file)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return _UNLIMITED


def render(header: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Iterable[str] = (),
           width: int | None = None) -> str:
    """``rows`` under ``header`` as aligned text columns (the columns named in ``right`` aligned
    right: numbers), each cell whole; ``width`` defaults to ``output_width()``."""
    from rich.console import Console
    from rich.table import Table

    right = set(right)
    table = Table(box=None, pad_edge=False, header_style=None)
    for name in header:
        table.add_column(name, justify="right" if name in right else "left", overflow="fold")
    for row in rows:
        table.add_row(*("-" if cell is None or cell == "" else str(cell) for cell in row))
    out = io.StringIO()
    Console(file=out, width=width or output_width(), color_system=None, force_terminal=False,
            highlight=False, emoji=False, markup=False).print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())
