"""Render tables for people (rich) or machines (csv, json).

Data stays in nanoseconds; in the terminal table, columns named `... (ns)` are shown in milliseconds.
A terminal table fits the terminal's width: long names are shortened in the middle and the least important
columns are left out, with a note naming them; `wide=True` shows every column and every name whole.
A table of timed rows (a column in ns or ms) also fits the terminal's height: its first rows (tables come
ordered by what matters, largest time first), as many as fit, then one line saying how many are left out
and how to see them (`limit=N` shows N rows, 0 every row). Shortening and dropping happen in the terminal
only, never in csv or json, which keep every row and column. Drawing only the rows that fit is also what
keeps a big table quick: rich took 13.4 s to draw 19,000 rows.

Text from outside (names from exports, paths, error messages) never reaches rich as markup: every cell,
title and note is a rich Text, and control characters are shown as visible escapes (`\\x1b`).
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console
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
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


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

    return _CONTROL.sub(sub, text)


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
            _cell(_py(v), ns or (ns_row and i > 0), pct, places, ident)
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


def _py(value: Any) -> Any:
    """numpy scalars to Python ones."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value


def to_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    # json.dump later writes control characters as \u001b escapes: the text is kept, never raw ESC
    return json.loads(df.to_json(orient="records", double_precision=15))


def csv_safe(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with control characters in text cells and headers written as visible escapes (tabs and newlines
    stay: quoted csv holds them); the same frame when there are none."""
    text = [c for c in df.columns if df[c].dtype.kind not in "iufcbmM"]  # object, string, category

    def clean(v: Any) -> Any:
        return visible(v, keep="\t\n") if isinstance(v, str) else v

    dirty = any(_CONTROL.search(str(c)) for c in df.columns) or any(
        df[c].map(lambda v: isinstance(v, str) and _CONTROL.search(v) is not None).any() for c in text
    )
    if not dirty:
        return df
    out = df.copy()
    for c in text:
        out[c] = out[c].map(clean)
    return out.rename(columns=lambda c: clean(c) if isinstance(c, str) else c)


def console_for(out: TextIO | None = None, width: int | None = None) -> Console:
    """A console on `out` (stdout) as wide as the terminal: COLUMNS when set, else the size of whichever
    standard stream is a terminal, else 80."""
    from rich.console import Console

    return Console(file=out or sys.stdout, width=width, highlight=False)


def print_lines(
    console: Console, text: str, style: str = "", prefix: str = "", prefix_style: str = ""
) -> None:
    """Outside text as plain lines wrapped at spaces to the console's width; a word longer than a line (a
    path) is kept whole on a line of its own, never broken."""
    from rich.text import Text

    body = visible(text, keep="\n")
    lines = []
    for para in body.split("\n"):
        lines += textwrap.wrap(
            para,
            max(console.width - len(prefix), 20),
            break_long_words=False,
            break_on_hyphens=False,
        ) or [""]
    for n, line in enumerate(lines):
        first = Text(prefix if n == 0 else " " * len(prefix), style=prefix_style if n == 0 else "")
        console.print(first + Text(line, style=style), soft_wrap=True)


def _text_lines(console: Console, text: str | None, prefix: str = "") -> int:
    """How many lines print_lines takes for `text`."""
    if not text:
        return 0
    width = max(console.width - len(prefix), 20)
    paras = visible(text, keep="\n").split("\n")
    return sum(
        max(1, len(textwrap.wrap(p, width, break_long_words=False, break_on_hyphens=False))) for p in paras
    )


def _table_for(df: pd.DataFrame, console: Console, wide: bool) -> tuple[Table, list[str]]:
    if wide:
        table, dropped = rich_table(df)
        console.width = max(console.width, table_width(c.width or 0 for c in table.columns))
        return table, dropped
    return rich_table(df, console.width)


def timed(df: pd.DataFrame) -> bool:
    """Whether the terminal shows `df` cut to its height: a table of timed rows (a column in ns or ms),
    unless its `rows` attr says "all". Records (field and value, checks) are shown whole."""
    if df.attrs.get("rows") == "all":
        return False
    return any(str(c).endswith(("(ns)", "(ms)")) for c in df.columns)


def rows_left_out(left: int, total: int, height: int | None, option: bool = True) -> str:
    """The line under a table cut to fit the terminal's `height` (None: cut by --limit); `option`: the
    command has --limit."""
    how = (
        "--limit N shows N rows (0: all), --format csv or json every row"
        if option
        else ("--format csv or json shows every row")
    )
    why = f" to fit {height} lines" if height is not None else ""
    return f"{left:,} of {total:,} rows left out{why}: {how}"


def _render(
    df: pd.DataFrame,
    console: Console,
    title: str | None,
    notes: Iterable[str],
    wide: bool,
    limit: int | None = None,
) -> None:
    """Draw `df` (its first `limit` rows; 0: all; None or FIT: as many as fit the console's height)."""
    notes = list(notes)
    option = limit != FIT
    limit = None if limit == FIT else limit
    if limit is None and not timed(df):
        limit = 0
    total = len(df)
    rows = total if limit == 0 or limit is None else min(limit, total)
    if limit is None:  # lines besides the table's: title, notes, the two notes of what was left out, prompt
        around = _text_lines(console, title) + sum(_text_lines(console, n, "note: ") for n in notes)
        around += 2 * _text_lines(console, rows_left_out(total, total, console.height, option), "note: ") + 1
        rows = min(total, max(FEWEST_ROWS, console.height - around - 4))  # 4: borders and a header line
    table, dropped = _table_for(df.head(rows) if rows < total else df, console, wide)
    for _ in range(3) if limit is None else ():  # rows or headers taller than a line: take rows off
        over = len(console.render_lines(table, console.options)) + around - console.height
        if over <= 0 or rows <= FEWEST_ROWS:
            break
        rows = max(FEWEST_ROWS, rows - over)
        table, dropped = _table_for(df.head(rows), console, wide)
    if title:
        print_lines(console, title, style="italic")
    console.print(table)
    if dropped:
        notes.append(
            f"{len(dropped)} of {len(df.columns)} columns left out to fit {console.width} columns: "
            f"{', '.join(dropped)}; --wide shows them"
        )
    if rows < total:
        notes.append(rows_left_out(total - rows, total, console.height if limit is None else None, option))
    for note in notes:
        print_lines(console, note, prefix="note: ", prefix_style="dim")


def _stderr_notes(notes: Iterable[str]) -> None:
    for note in notes:
        print(f"note: {visible(note, keep=chr(10))}", file=sys.stderr)


def emit(
    df: pd.DataFrame,
    fmt: Format | str = Format.table,
    *,
    title: str | None = None,
    notes: Iterable[str] = (),
    file: TextIO | None = None,
    wide: bool = False,
    limit: int | None = FIT,
) -> None:
    """Print one table in the chosen format. Notes go to stderr for csv/json so output stays parseable.
    The table format shows the first `limit` rows (0: all; None: as many as fit the terminal's height, and
    the note offers --limit; FIT, for commands without that option: the same, without the offer), csv and
    json every row."""
    fmt = Format(fmt)
    out = file or sys.stdout
    if fmt is Format.csv:
        csv_safe(df).to_csv(out, index=False, lineterminator="\n")
    elif fmt is Format.json:
        json.dump(to_records(df), out, indent=1)
        out.write("\n")
    else:
        _render(df, console_for(out), title, notes, wide, limit)
        return
    _stderr_notes(notes)


def emit_many(
    tables: Sequence[tuple[str, pd.DataFrame]],
    fmt: Format | str = Format.table,
    *,
    notes: Iterable[str] = (),
    skipped: Mapping[str, str] | None = None,
    file: TextIO | None = None,
    wide: bool = False,
    limit: int | None = FIT,
) -> None:
    """Several titled tables: one after another (table, csv with a title line) or one JSON object; in the
    table format each fitted to the terminal's height as `emit` fits one (`limit`).

    `skipped` (title -> why) names tables that could not be built: a `skipped` list in JSON, a comment line
    each in csv; the table format leaves saying so to the caller (a warning on stderr).
    """
    fmt = Format(fmt)
    out = file or sys.stdout
    notes = list(notes)
    if fmt is Format.json:
        doc: dict[str, Any] = {name: to_records(df) for name, df in tables}
        if skipped is not None:
            doc["skipped"] = [{"table": name, "reason": why} for name, why in skipped.items()]
        json.dump(doc, out, indent=1)
        out.write("\n")
        _stderr_notes(notes)
        return
    if fmt is Format.csv:
        for i, (name, df) in enumerate(tables):
            if i:
                out.write("\n")
            out.write(f"# {visible(name)}\n")
            emit(df, fmt, file=out)
        if skipped:
            out.write("\n" if tables else "")
            for name, why in skipped.items():
                out.write(f"# skipped {visible(name)}: {visible(why)}\n")
        _stderr_notes(notes)
        return
    console = console_for(out)
    for i, (name, df) in enumerate(tables):
        last = i == len(tables) - 1
        _render(df, console, name, notes if last else (), wide, limit)
    if not tables:
        for note in notes:
            print_lines(console, note, prefix="note: ", prefix_style="dim")


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub pipe table for pull requests: `(ns)` columns in ms, pipes and control characters escaped."""
    import pandas as pd

    def cell(v: Any) -> str:
        if v is None or (isinstance(v, float) and v != v) or v is pd.NA:
            return ""
        if isinstance(v, float):
            return f"{v:,.2f}"
        if isinstance(v, int):
            return f"{v:,}"
        return visible(str(v)).replace("|", "\\|")

    cols = list(df.columns)
    heads = [c.replace("(ns)", "(ms)") if isinstance(c, str) else str(c) for c in cols]
    lines = ["| " + " | ".join(cell(h) for h in heads) + " |"]
    lines.append("|" + "|".join("---:" if df[c].dtype.kind in "iuf" else "---" for c in cols) + "|")
    for row in df.itertuples(index=False):
        values = [
            _py(v) / 1e6 if isinstance(c, str) and c.endswith("(ns)") and _py(v) is not None else _py(v)
            for c, v in zip(cols, row, strict=True)
        ]
        lines.append("| " + " | ".join(cell(v) for v in values) + " |")
    return "\n".join(lines) + "\n"
