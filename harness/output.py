"""Render tables for people (rich) or machines (csv, json).

Data stays in nanoseconds; in the terminal table, columns named `... (ns)` are shown in milliseconds.
Long text is shortened for the terminal only, never in csv or json.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

MAX_TEXT = 72
# Identifiers, printed as nsys prints them (no thousands separators).
ID_COLUMNS = frozenset({"PID", "TID", "DevId", "Device", "Stream", "Context", "CorrId", "GlobalTid"})


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


def shorten(text: str, width: int = MAX_TEXT) -> str:
    """Keep the head and tail of a long name (kernel names differ at both ends)."""
    if len(text) <= width:
        return text
    head = (width - 1) * 2 // 3
    tail = width - 1 - head
    return f"{text[:head]}…{text[-tail:]}"


def _cell(
    value: Any, ns_column: bool, pct_column: bool, wrap: bool = False, digits: int = 1, ident: bool = False
) -> str:
    import math

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if ns_column and isinstance(value, int | float):
        return f"{value / 1e6:,.3f}"
    if pct_column and isinstance(value, int | float):
        return f"{value:.{digits}f}"
    if ident and isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isinf(value):
            return "inf"
        return f"{value:,.3f}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value) if wrap else shorten(str(value))


def rich_table(df: pd.DataFrame, title: str | None = None, caption: str | None = None):
    """A rich Table of `df`; `(ns)` columns (and rows whose label ends in `(ns)`) shown in milliseconds.

    Nothing is cut: each column is as wide as its widest value or header word; headers wrap at spaces.
    """
    from rich.table import Table

    table = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    wrapped = set(df.attrs.get("wrap", ()))  # columns rich may wrap instead of shortening
    digits = df.attrs.get("digits", {})  # decimals of a percent column, where 1 is too few
    # per column: ns, percent, wrap, percent digits, identifier
    kinds = [
        (c.endswith("(ns)"), c.endswith("(%)"), c in wrapped, digits.get(c, 1), c in ID_COLUMNS)
        for c in map(str, df.columns)
    ]
    rows = []
    for row in df.itertuples(index=False):
        label = str(row[0]) if len(row) else ""
        ns_row = label.endswith("(ns)")
        cells = [
            _cell(_py(v), ns or (ns_row and i > 0), pct, wrap, places, ident)
            for i, (v, (ns, pct, wrap, places, ident)) in enumerate(zip(row, kinds, strict=True))
        ]
        if ns_row:
            cells[0] = cells[0].replace("(ns)", "(ms)")
        rows.append(cells)
    for i, col in enumerate(df.columns):
        name = str(col).replace("(ns)", "(ms)") if kinds[i][0] else str(col)
        numeric = df[col].dtype.kind in "iuf"
        widest = max((len(r[i]) for r in rows), default=0)
        word = max((len(w) for w in name.split()), default=0)
        table.add_column(
            name,
            justify="right" if numeric else "left",
            width=None if kinds[i][2] else max(widest, word),
        )
    for cells in rows:
        table.add_row(*cells)
    return table


def _py(value: Any) -> Any:
    """numpy scalars to Python ones."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value


def to_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return json.loads(df.to_json(orient="records", double_precision=15))


def emit(
    df: pd.DataFrame,
    fmt: Format | str = Format.table,
    *,
    title: str | None = None,
    notes: Iterable[str] = (),
    file=None,
) -> None:
    """Print one table in the chosen format. Notes go to stderr for csv/json so output stays parseable."""
    fmt = Format(fmt)
    out = file or sys.stdout
    notes = list(notes)
    if fmt is Format.csv:
        df.to_csv(out, index=False, lineterminator="\n")
    elif fmt is Format.json:
        json.dump(to_records(df), out, indent=1)
        out.write("\n")
    else:
        from rich.console import Console

        terminal = Console()
        # a terminal's own width; pipes and files get room for wide tables
        console = Console(
            file=out, width=terminal.width if terminal.is_terminal and out is sys.stdout else 200
        )
        table = rich_table(df, title=title)
        needed = sum((c.width or 20) + 3 for c in table.columns) + 1
        if needed > console.width:  # wider than the terminal: let lines wrap rather than cut numbers
            console = Console(file=out, width=needed)
        console.print(table)
        for note in notes:
            console.print(f"[dim]note:[/dim] {note}", highlight=False)
        return
    for note in notes:
        print(f"note: {note}", file=sys.stderr)


def emit_many(
    tables: Sequence[tuple[str, pd.DataFrame]],
    fmt: Format | str = Format.table,
    *,
    notes: Iterable[str] = (),
    file=None,
) -> None:
    """Several titled tables: one after another (table, csv with a title line) or one JSON object."""
    fmt = Format(fmt)
    out = file or sys.stdout
    if fmt is Format.json:
        json.dump({name: to_records(df) for name, df in tables}, out, indent=1)
        out.write("\n")
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        return
    for i, (name, df) in enumerate(tables):
        if fmt is Format.csv:
            if i:
                out.write("\n")
            out.write(f"# {name}\n")
            emit(df, fmt, file=out)
        else:
            emit(df, fmt, title=name, file=out)
    if fmt is Format.csv:
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    else:
        from rich.console import Console

        console = Console(file=out)
        for note in notes:
            console.print(f"[dim]note:[/dim] {note}", highlight=False)
