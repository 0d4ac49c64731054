"""How a table fits the terminal: cells as text (ns as ms, ids as nsys prints them, control characters as
visible escapes), names shortened in the middle, and the least important columns left out first: columns
empty in every row, then by `rank`, or by a table's own `priority` (its `settings` that differ between rows
first, those alike last). A table's `deciding` columns (the verdict, the B side of a comparison, the
measured value) are never left out, nor a `status` column where a row is not ok (an OOM or interrupted
row's empty figures would read as numbers missing for no reason), nor either column of a table of two (a
field and its value). Where the columns kept do not fit even so, the table loses its outer border, then
its headers' long words are abbreviated (a note gives them whole), then names are shortened further; a
number is never cut."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.cli.terminal.text import MAX_TEXT, OUTPUT, abbreviation, distinct, visible

if TYPE_CHECKING:
    import pandas as pd
    from rich.table import Table

COMFORTABLE = 30  # names and sentences are shortened to this before any column is left out
NARROWEST = 12  # ... and to this when even the most important column alone does not fit
TIGHTEST = 8  # ... and towards this, the fewest names first, when the kept columns do not fit at NARROWEST
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
# With a summary's name, what tells its rows apart (the same kernel launched with two grids): shown where
# rows would otherwise read alike.
KEYS = frozenset({"GridXYZ", "BlockXYZ", "Style"})
COUNTS = frozenset(
    {"instances", "num calls", "count", "qcount", "steps", "nvtx inst", "kern inst", "kernels"}
)

EMPTY = "—"  # a cell with no value
STATUS = "status"  # a row's status (any case): kept where some row's is not OK


def _cell(
    value: Any, ns_column: bool, pct_column: bool, digits: int = 1, ident: bool = False
) -> tuple[str, bool]:
    """The cell's text and whether it is a number (numbers are never shortened)."""
    import math

    if value is None or type(value).__name__ == "NAType" or (isinstance(value, float) and math.isnan(value)):
        return OUTPUT["empty"], False  # pandas' NA too (nullable integer columns): never printed as <NA>
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
    fill: int  # what its cells take, its header aside
    least: int  # ... and the least they take on a terminal too narrow for NARROWEST (TIGHTEST names)


def _columns(df: pd.DataFrame, wide: bool) -> list[_Column]:
    from rich.cells import cell_len

    wrapped = set(df.attrs.get("wrap", ()))  # sentences: wrap them rather than cut them
    whole = set(df.attrs.get("whole", ()))  # ids a user copies (run ids): never shortened
    digits = df.attrs.get("digits", {})  # decimals of a percent column, where 1 is too few
    narrow = set(df.attrs.get("narrow", ()))  # names a narrow terminal shortens as far as they go first
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
        fill = widest if wide or kind != "shorten" else min(widest, MAX_TEXT)
        natural = max(word, fill)
        flexible = kind != "fixed"
        out.append(
            _Column(
                header=header,
                cells=texts,
                numeric=numeric,
                kind=kind,
                natural=natural,
                comfortable=max(word, min(natural, NARROWEST if name in narrow else COMFORTABLE))
                if flexible
                else natural,
                narrowest=max(word, min(natural, NARROWEST)) if flexible else natural,
                fill=fill,
                least=min(fill, TIGHTEST if kind == "shorten" else NARROWEST) if flexible else fill,
            )
        )
    return out


def table_width(widths: Iterable[int], edge: bool = True) -> int:
    """Width of a boxed table with these column widths: a border and one space of padding each side (no
    outer border without `edge`)."""
    widths = list(widths)
    return sum(widths) + 3 * len(widths) + (1 if edge else -1)


@dataclass
class Layout:
    shown: list[int]  # the columns shown, in table order
    widths: list[int]
    edge: bool = True  # the table's outer border, left off where the kept columns need its two cells
    short: dict[str, str] = field(default_factory=dict)  # header words abbreviated to fit: word -> short


def fit(
    columns: Sequence[_Column],
    order: Sequence[int],
    budget: int,
    keep: int = 1,
    together: Sequence[Sequence[int]] = (),
) -> Layout:
    """Which columns to show and their widths so the table fits `budget` cells.

    Names are shortened to COMFORTABLE first; then the least important columns (end of `order`) are left
    out, the columns of a group in `together` (an interval's bounds) all at once; then names are shortened
    to NARROWEST; then the kept columns are made narrower still (`_tight`). Names get the room left, the
    most important first. The first `keep` of `order` (the most important column, or the deciding ones)
    always stay.
    """
    natural = [c.natural for c in columns]
    if table_width(natural) <= budget:
        return Layout(list(range(len(columns))), natural)
    group = {i: set(g) for g in together for i in g}
    shown = list(order)
    kept = {j for i in order[: max(keep, 1)] for j in group.get(i, {i})}
    while table_width(columns[i].comfortable for i in shown) > budget:
        left = [i for i in shown if i not in kept]
        if not left:
            break
        shown = [i for i in shown if i not in group.get(left[-1], {left[-1]})]
    floor = "comfortable" if table_width(columns[i].comfortable for i in shown) <= budget else "narrowest"
    widths = {i: getattr(columns[i], floor) for i in shown}
    if table_width(widths.values()) > budget:
        tight = _tight(columns, shown, budget)
        if tight is not None:
            return tight
    return _grown(Layout(shown, [widths[i] for i in shown]), [columns[i].natural for i in shown], budget)


def _grown(layout: Layout, natural: Sequence[int], budget: int) -> Layout:
    """`layout` (its columns most important first) with the room left given to them in that order, up to
    their `natural` widths, then put in table order."""
    widths = list(layout.widths)
    room = budget - table_width(widths, layout.edge)
    for n, most in enumerate(natural):
        grow = max(0, min(room, most - widths[n]))
        widths[n] += grow
        room -= grow
    order = sorted(range(len(widths)), key=lambda n: layout.shown[n])
    return Layout([layout.shown[n] for n in order], [widths[n] for n in order], layout.edge, layout.short)


def _tight(columns: Sequence[_Column], shown: Sequence[int], budget: int) -> Layout | None:
    """The kept columns (most important first) on a terminal too narrow for them at NARROWEST, or None
    where even this does not fit (the terminal then wraps the table's lines: numbers are never cut). In
    turn until they fit: the table's outer border left off; the header words that save the most abbreviated
    (each alike in every header, as text.abbreviation writes it); names below NARROWEST, towards TIGHTEST,
    the column that cuts the fewest names first."""
    from rich.cells import cell_len

    short: dict[str, str] = {}
    floor = {i: max(columns[i].least, min(columns[i].fill, NARROWEST)) for i in shown}

    def width(i: int, words: dict[str, str]) -> int:
        head = (cell_len(words.get(w, w)) for w in columns[i].header.split())
        return max(floor[i], max(head, default=0))

    def total(words: dict[str, str]) -> int:
        return table_width((width(i, words) for i in shown), edge=False)

    words = {w for i in shown for w in columns[i].header.split()}
    options = {w: a for w in words if (a := abbreviation(w)) is not None and cell_len(a) < cell_len(w)}
    while total(short) > budget and options:
        best = min(options, key=lambda w: (total({**short, w: options[w]}), w))
        if total({**short, best: options[best]}) >= total(short):
            break
        short[best] = options.pop(best)
    while total(short) > budget:
        names = [i for i in shown if floor[i] > columns[i].least and width(i, short) == floor[i]]
        if not names:
            return None
        # the fewest names cut, then the widest column, then the least important
        cut = {i: sum(cell_len(t) >= floor[i] for t in columns[i].cells) for i in names}
        i = min(names, key=lambda i: (cut[i], -floor[i], -shown.index(i)))
        floor[i] -= 1
    # the room left goes to names, never to a header whose words were abbreviated
    natural = [max(width(i, short), columns[i].fill) for i in shown]
    return _grown(Layout(list(shown), [width(i, short) for i in shown], False, short), natural, budget)


_BOUND = re.compile(r"\bCI (low|Low|LOW)\b")


def intervals(names: Sequence[str]) -> list[tuple[int, int]]:
    """The (low, high) column pairs of confidence intervals, `X CI low (u)` with `X CI high (u)`: shown
    together or not at all (a lone bound reads as a figure)."""
    pairs = []
    for i, name in enumerate(names):
        m = _BOUND.search(name)
        if m:
            high = {"low": "high", "Low": "High", "LOW": "HIGH"}[m.group(1)]
            partner = f"{name[: m.start(1)]}{high}{name[m.end(1) :]}"
            if partner in names:
                pairs.append((i, names.index(partner)))
    return pairs


def _together(order: list[int], groups: Sequence[Sequence[int]]) -> list[int]:
    """`order` with each group's columns moved next to its most important one."""
    out: list[int] = []
    for i in order:
        if i not in out:
            out += next(([j for j in order if j in g] for g in groups if i in g), [i])
    return out


def _order(df: pd.DataFrame, empty: set[int]) -> tuple[list[int], int]:
    """Column indices, most important first, and how many of them are never left out: the table's
    `deciding` columns, then its own `priority`, then by `rank`; the columns `empty` in every row last (an
    empty column decides nothing, even a deciding one, unless the table says its empty cells are a finding:
    `attrs["kept_empty"]`, as an overhead that none of the steps showed). Of the table's `settings`, those
    that differ between rows come right after its first `priority` column, those alike in every row last.
    An interval's bounds stay next to each other."""
    names = [str(c) for c in df.columns]
    empty = empty - {names.index(c) for c in df.attrs.get("kept_empty", ()) if c in names}
    # dict.fromkeys: a name listed twice is still one column
    deciding = [names.index(c) for c in dict.fromkeys(df.attrs.get("deciding", ())) if c in names]
    deciding += [i for i in _not_ok(df) if i not in deciding]
    deciding = [i for i in deciding if i not in empty]
    first = [names.index(c) for c in dict.fromkeys(df.attrs.get("priority", ())) if c in names]
    first = [i for i in first if i not in deciding and i not in empty]
    # a setting whose value differs between rows is what tells them apart: next after the table's label;
    # one that every row shares tells nothing apart: left out before any other column with a value
    varied, alike = _settings(df, names, {*deciding, *empty})
    first = [*first[:1], *varied, *(i for i in first[1:] if i not in varied and i not in alike)]
    taken = {*deciding, *first, *alike, *empty}
    rest = sorted((i for i in range(len(names)) if i not in taken), key=lambda i: (rank(names[i]), i))
    pairs = intervals(names)
    order = _together([*deciding, *first, *rest, *alike, *sorted(empty)], pairs)
    deciding_too = {j for i in deciding for p in pairs if i in p for j in p if j not in empty}
    return order, len({*deciding, *deciding_too})


def _settings(df: pd.DataFrame, names: list[str], placed: set[int]) -> tuple[list[int], list[int]]:
    """The table's `settings` columns (what a row's run was configured with: precision, compile, ...) not
    `placed` already: those whose value differs between rows, and those every row shares (of a table of one
    row, neither: its settings describe it)."""
    settings = [names.index(c) for c in dict.fromkeys(df.attrs.get("settings", ())) if c in names]
    settings = [i for i in settings if i not in placed]
    if len(df) < 2:
        return [], []
    varied = [i for i in settings if df.iloc[:, i].astype(str).nunique() > 1]
    return varied, [i for i in settings if i not in varied]


def _not_ok(df: pd.DataFrame) -> list[int]:
    """The `status` columns in which some row is not ok (OOM, interrupted, error, fail, warn)."""
    out = []
    for i, name in enumerate(df.columns):
        if str(name).lower() == STATUS:
            said = {str(v).strip().lower() for v in df.iloc[:, i] if isinstance(v, str)}
            if said - {"ok", ""}:
                out.append(i)
    return out


def _alike(
    columns: Sequence[_Column], shown: Sequence[int], cells: dict[int, list[str]], order: Sequence[int]
) -> list[int]:
    """The fewest left-out columns that tell apart rows shown alike: rows identical in every shown cell
    (any column), and rows whose shown names and labels read alike while their figures differ (a KEYS
    column: the same kernel launched with two grids). Each column in `order` (most important first), the
    keys first, taken only where it tells apart rows still alike."""
    if not shown:
        return []
    count = len(cells[shown[0]])

    def alike(by: Sequence[int]) -> list[list[int]]:
        rows: dict[tuple[str, ...], list[int]] = {}
        for r in range(count):
            rows.setdefault(tuple(cells[i][r] for i in by), []).append(r)
        return [g for g in rows.values() if len(g) > 1]

    labels = [i for i in shown if not columns[i].numeric]
    same, named = alike(shown), alike(labels) if labels else []
    hidden = [i for i in order if i not in shown]
    keys = [i for i in hidden if columns[i].header in KEYS]
    taken: list[int] = []
    for i in [*keys, *(i for i in hidden if i not in keys)]:
        groups = [*same, *named] if i in keys else same
        groups = [g for g in groups if len({tuple(columns[j].cells[r] for j in taken) for r in g}) < len(g)]
        if any(len({columns[i].cells[r] for r in g}) > 1 for g in groups):
            taken.append(i)
    return taken


def _cells(
    columns: Sequence[_Column], shown: Sequence[int], widths: Sequence[int]
) -> tuple[dict[int, list[str]], list[str]]:
    """The shown cells (names shortened, different ones kept different), and the numbered names' notes."""
    cells: dict[int, list[str]] = {}
    notes: list[str] = []
    for i, w in zip(shown, widths, strict=True):
        c = columns[i]
        if c.kind == "wrap":
            cells[i] = c.cells
            continue
        cells[i], full = distinct(c.cells, w)
        notes += [f"{c.header} {line}" for line in full]
    return cells, notes


@dataclass
class Fitted:
    table: Table
    dropped: list[str]  # headers of the columns left out
    notes: list[str]  # the full names of numbered ones, the abbreviated header words in full
    shown: list[str]  # the headers of the columns shown, whole


def rich_table(df: pd.DataFrame, width: int | None = None) -> Fitted:
    """A rich Table of `df` that fits `width` cells (None: every column, every name whole), the headers of
    the columns left out to fit, and notes on names shortened alike. Rows that would look alike keep the
    columns that tell them apart."""
    from rich.table import Table
    from rich.text import Text

    columns = _columns(df, wide=width is None)
    if width is None:
        layout = Layout(list(range(len(columns))), [c.natural for c in columns])
        cells, notes = _cells(columns, layout.shown, layout.widths)
    else:
        empty = {i for i, c in enumerate(columns) if c.cells and all(t == OUTPUT["empty"] for t in c.cells)}
        order, keep = _order(df, empty)
        if len(order) == 2:  # a label alone says nothing: `show`'s fields without their values
            keep = 2
        together = intervals([str(c) for c in df.columns])
        layout = fit(columns, order, width, keep, together)
        cells, notes = _cells(columns, layout.shown, layout.widths)
        apart = _alike(columns, layout.shown, cells, order)
        if apart:  # kept next to the deciding columns (or the most important one)
            keep = max(keep, 1)
            order = _together([*order[:keep], *apart, *(i for i in order[keep:] if i not in apart)], together)
            layout = fit(columns, order, width, keep + len(apart), together)
            cells, notes = _cells(columns, layout.shown, layout.widths)
    shown, short = layout.shown, layout.short
    table = Table(show_edge=layout.edge)
    for i, w in zip(shown, layout.widths, strict=True):
        c = columns[i]
        header = " ".join(short.get(word, word) for word in c.header.split()) if short else c.header
        # headers wrap at spaces; cells wrap only in wrap columns (the rest were made to fit)
        justify = "right" if c.numeric else "left"
        table.add_column(Text(header, overflow="fold"), justify=justify, width=w, overflow="fold")
    for r in range(len(df)):
        row = [
            Text(cells[i][r], overflow="fold")
            if columns[i].kind == "wrap"
            else Text(cells[i][r], no_wrap=True, overflow="ellipsis")
            for i in shown
        ]
        table.add_row(*row)
    dropped = [columns[i].header for i in range(len(columns)) if i not in shown]
    if short:  # in the order the headers show them
        words = dict.fromkeys(w for i in shown for w in columns[i].header.split() if w in short)
        notes.append("headers abbreviated to fit: " + ", ".join(f"{short[w]} = {w}" for w in words))
    return Fitted(table, dropped, notes, [columns[i].header for i in shown])


def python_value(value: Any) -> Any:
    """numpy scalars to Python ones."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value
