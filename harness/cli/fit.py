"""How a table fits the terminal: cells as text (ns as ms, ids as nsys prints them, control characters as
visible escapes), names shortened in the middle, and the least important columns left out first
(`rank`, or a table's own `priority`: its deciding columns)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from rich.table import Table

MAX_TEXT = 72  # a name never takes more than this, even on a wide terminal (unless wide=True)
COMFORTABLE = 30  # names and sentences are shortened to this before any column is left out
NARROWEST = 12  # ... and to this when even the most important column alone does not fit
FEWEST_ROWS = 5  # a table fitted to a short terminal still shows this many rows
# `limit` of a command without a --limit option: rows fit the terminal, and the note does not offer --limit
FIT: Any = "fit"
# Identifiers, printed as nsys prints them (no thousands separators).
ID_COLUMNS = frozenset({"PID", "TID", "DevId", "Device", "Stream", "Context", "CorrId", "GlobalTid"})
# What a row is about: kept before any figure (lower case).
LABELS = frozenset(
    {"name", "kernel name", "range", "nvtx range", "operation", "phase", "metric", "field", "value", "check",
     "status", "detail", "panel", "size", "run", "model"}
)  # fmt: skip
COUNTS = frozenset(
    {"instances", "num calls", "count", "qcount", "steps", "nvtx inst", "kern inst", "kernels"}
)

# C0 and C1 control characters, DEL, and the bidi overrides that reorder what a terminal shows
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def visible(text: str, keep: str = "") -> str:
    """`text` with control characters (ESC, BEL, NUL, newlines, …) as visible escapes, except those in `keep`.

    A name from an export can then neither move the cursor nor retitle the terminal nor break a table row.
    """

    def sub(m: re.Match[str]) -> str:
        c = m.group()
        if c in keep:
            return c
        code = ord(c)
        return _NAMED.get(c) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")

    return CONTROL.sub(sub, text)


def shorten(text: str, width: int = MAX_TEXT) -> str:
    """Keep the head and tail of a long name (kernel names differ at both ends)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head = (width - 1) * 2 // 3
    tail = width - 1 - head
    return f"{text[:head]}…{text[-tail:]}" if tail else f"{text[:head]}…"


def _cell(
    value: Any, ns_column: bool, pct_column: bool, digits: int = 1, ident: bool = False
) -> tuple[str, bool]:
    """The cell's text and whether it is a number (numbers are never shortened)."""
    import math

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—", False
    if isinstance(value, bool):
        return ("yes" if value else "no"), False
    if ns_column and isinstance(value, int | float):
        return f"{value / 1e6:,.3f}", True
    if pct_column and isinstance(value, int | float):
        return f"{value:.{digits}f}", True
    if ident and isinstance(value, int):
        return str(value), True
    if isinstance(value, float):
        if math.isinf(value):
            return "inf", True
        return (f"{value:,.3f}" if abs(value) < 1e6 else f"{value:,.0f}"), True
    if isinstance(value, int):
        return f"{value:,}", True
    return visible(str(value)), False


def rank(column: str) -> int:
    """How much a column matters when space is short (0: most): labels, totals, shares, counts, averages,
    medians, the rest, extremes, spreads, identifiers. Named by nsys's own columns, so every nsys-shaped
    table ranks its columns the same way."""
    name = column.lower()
    stat = re.sub(r"\s*\([^)]*\)$", "", name)  # without the unit
    if name in LABELS:
        return 0
    if stat.startswith("total") or stat == "duration":
        return 1
    if name.endswith("(%)"):
        return 2
    if stat in COUNTS or stat.endswith("calls"):
        return 3
    if stat.endswith("avg") or "mean" in stat:
        return 4
    if stat.endswith("med") or "median" in stat:
        return 5
    if column in ID_COLUMNS:
        return 9
    if stat.endswith(("min", "max")):
        return 7
    if "std" in stat:
        return 8
    return 6


@dataclass
class _Column:
    header: str
    cells: list[str]
    numeric: bool
    kind: str  # fixed: never narrower than its widest cell; shorten: cut in the middle; wrap: wrap lines
    natural: int
    comfortable: int
    narrowest: int


def _columns(df: pd.DataFrame, wide: bool) -> list[_Column]:
    from rich.cells import cell_len

    wrapped = set(df.attrs.get("wrap", ()))  # sentences: wrap them rather than cut them
    whole = set(df.attrs.get("whole", ()))  # ids a user copies (run ids): never shortened
    digits = df.attrs.get("digits", {})  # decimals of a percent column, where 1 is too few
    names = [str(c) for c in df.columns]
    kinds = [(c.endswith("(ns)"), c.endswith("(%)"), digits.get(c, 1), c in ID_COLUMNS) for c in names]
    rows = []
    for row in df.itertuples(index=False):
        label = str(row[0]) if len(row) else ""
        ns_row = label.endswith("(ns)")
        cells = [
            _cell(python_value(v), ns or (ns_row and i > 0), pct, places, ident)
            for i, (v, (ns, pct, places, ident)) in enumerate(zip(row, kinds, strict=True))
        ]
        if ns_row:
            cells[0] = (cells[0][0].replace("(ns)", "(ms)"), cells[0][1])
        rows.append(cells)
    out = []
    for i, name in enumerate(names):
        header = visible(name.replace("(ns)", "(ms)") if kinds[i][0] else name)
        texts = [r[i][0] for r in rows]
        numeric = df[df.columns[i]].dtype.kind in "iuf" or (bool(rows) and all(r[i][1] for r in rows))
        word = max((cell_len(w) for w in header.split()), default=0)
        widest = max((cell_len(t) for t in texts), default=0)
        kind = "wrap" if name in wrapped else "fixed" if numeric or name in whole else "shorten"
        natural = max(word, widest if wide or kind != "shorten" else min(widest, MAX_TEXT))
        flexible = kind != "fixed"
        out.append(
            _Column(
                header=header,
                cells=texts,
                numeric=numeric,
                kind=kind,
                natural=natural,
                comfortable=max(word, min(natural, COMFORTABLE)) if flexible else natural,
                narrowest=max(word, min(natural, NARROWEST)) if flexible else natural,
            )
        )
    return out


def table_width(widths: Iterable[int]) -> int:
    """Width of a boxed table with these column widths: a border and one space of padding each side."""
    widths = list(widths)
    return sum(widths) + 3 * len(widths) + 1


def fit(columns: Sequence[_Column], order: Sequence[int], budget: int) -> tuple[list[int], list[int]]:
    """Which columns to show (indices, table order) and their widths so the table fits `budget` cells.

    Names are shortened to COMFORTABLE first; then the least important columns (end of `order`) are left
    out; then names get the room left, the most important first. The most important column always stays.
    """
    natural = [c.natural for c in columns]
    if table_width(natural) <= budget:
        return list(range(len(columns))), natural
    shown = list(order)
    while len(shown) > 1 and table_width(columns[i].comfortable for i in shown) > budget:
        shown.pop()
    floor = "comfortable" if table_width(columns[i].comfortable for i in shown) <= budget else "narrowest"
    widths = {i: getattr(columns[i], floor) for i in shown}
    room = budget - table_width(widths.values())
    for i in shown:  # most important first
        grow = max(0, min(room, columns[i].natural - widths[i]))
        widths[i] += grow
        room -= grow
    keep = sorted(shown)
    return keep, [widths[i] for i in keep]


def _order(df: pd.DataFrame) -> list[int]:
    """Column indices, most important first: the table's own `priority` attr, then by `rank`."""
    names = [str(c) for c in df.columns]
    # dict.fromkeys: a name listed twice in `priority` is still one column
    first = [names.index(c) for c in dict.fromkeys(df.attrs.get("priority", ())) if c in names]
    rest = sorted((i for i in range(len(names)) if i not in first), key=lambda i: (rank(names[i]), i))
    return first + rest


def rich_table(df: pd.DataFrame, width: int | None = None) -> tuple[Table, list[str]]:
    """A rich Table of `df` that fits `width` cells (None: every column, every name whole), and the
    headers of the columns left out to fit."""
    from rich.table import Table
    from rich.text import Text

    columns = _columns(df, wide=width is None)
    if width is None:
        shown, widths = list(range(len(columns))), [c.natural for c in columns]
    else:
        shown, widths = fit(columns, _order(df), width)
    table = Table()
    for i, w in zip(shown, widths, strict=True):
        c = columns[i]
        # headers wrap at spaces; cells wrap only in wrap columns (the rest were made to fit)
        justify = "right" if c.numeric else "left"
        table.add_column(Text(c.header, overflow="fold"), justify=justify, width=w, overflow="fold")
    for r in range(len(df)):
        cells = []
        for i, w in zip(shown, widths, strict=True):
            text, kind = columns[i].cells[r], columns[i].kind
            if kind == "wrap":
                cells.append(Text(text, overflow="fold"))
            else:
                cells.append(Text(shorten(text, w), no_wrap=True, overflow="ellipsis"))
        table.add_row(*cells)
    dropped = [columns[i].header for i in range(len(columns)) if i not in shown]
    return table, dropped


def python_value(value: Any) -> Any:
    """numpy scalars to Python ones."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value
