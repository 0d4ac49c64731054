"""Render tables for people (rich) or machines (csv, json).

Data stays in nanoseconds; in the terminal table, columns named `... (ns)` are shown in milliseconds.
A terminal table fits the terminal's width: long names are shortened in the middle and the least important
columns are left out, with a note naming them; `wide=True` shows every column and every name whole.
A table of timed rows (a column in ns or ms) also fits the terminal's height: its first rows (tables come
ordered by what matters, largest time first), as many as fit, then one line saying how many are left out
and how to see them (`limit=N` shows N rows, 0 every row). Shortening and dropping happen in the terminal
only, never in csv or json, which keep every row and column (so do the columns a table's `terminal_drops`
attr names: left out of the terminal's table only). Drawing only the rows that fit is also what
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
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TextIO

from harness.cli.terminal.fit import FEWEST_ROWS, FIT, Fitted, python_value, rich_table, table_width
from harness.cli.terminal.streams import terminal_size
from harness.cli.terminal.text import CONTROL, visible

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


def to_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    # json.dump later writes control characters as \u001b escapes: the text is kept, never raw ESC
    return json.loads(df.to_json(orient="records", double_precision=15))


def to_json(df: pd.DataFrame) -> list[dict[str, Any]] | dict[str, Any]:
    """A table as JSON: a list of row objects; a record (`attrs["record"]`: a field column and a value
    column, as `harness show`'s run) one object keyed by field, its numbers as numbers."""
    if not df.attrs.get("record"):
        return to_records(df)
    field, value = (str(c) for c in df.columns[:2])
    return {str(row[field]): row[value] for row in to_records(df)}


def csv_safe(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with control characters in text cells and headers written as visible escapes (tabs and newlines
    stay: quoted csv holds them), and a cell that holds a structure (a run's files, {kind: path}) as JSON, as
    --format json gives it (pandas would write Python's repr, which no script reads back); the same frame
    when there are none."""
    text = [c for c in df.columns if df[c].dtype.kind not in "iufcbmM"]  # object, string, category

    def clean(v: Any) -> Any:
        if isinstance(v, dict | list):
            v = json.dumps(v, ensure_ascii=False, default=str)
        return visible(v, keep="\t\n") if isinstance(v, str) else v

    def unsafe(v: Any) -> bool:
        return isinstance(v, dict | list) or (isinstance(v, str) and CONTROL.search(v) is not None)

    dirty = any(CONTROL.search(str(c)) for c in df.columns) or any(df[c].map(unsafe).any() for c in text)
    if not dirty:
        return df
    out = df.copy()
    for c in text:
        out[c] = out[c].map(clean)
    return out.rename(columns=lambda c: clean(c) if isinstance(c, str) else c)


def console_for(out: TextIO | None = None, width: int | None = None, stderr: bool = False) -> Console:
    """A console on `out` (stdout; stderr with `stderr`) as wide as the terminal: COLUMNS when it is a
    width, else the size of whichever standard stream is a terminal, else 80
    (harness.cli.terminal.streams)."""
    from rich.console import Console

    columns, lines = terminal_size()
    file = out or (sys.stderr if stderr else sys.stdout)
    return Console(file=file, width=width or columns, height=lines, highlight=False)


def print_lines(
    console: Console,
    text: str,
    style: str = "",
    prefix: str = "",
    prefix_style: str = "",
    keep: str = "\n",
) -> None:
    """Outside text as plain lines wrapped at spaces to the console's width; a word longer than a line (a
    path) is kept whole on a line of its own, never broken. Control characters are escaped but those in
    `keep` (a title keeps none: a newline in a file name is shown as `\\n`)."""
    from rich.text import Text

    body = visible(text, keep=keep)
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


def _text_lines(console: Console, text: str | None, prefix: str = "", keep: str = "\n") -> int:
    """How many lines print_lines takes for `text`."""
    if not text:
        return 0
    width = max(console.width - len(prefix), 20)
    paras = visible(text, keep=keep).split("\n")
    return sum(
        max(1, len(textwrap.wrap(p, width, break_long_words=False, break_on_hyphens=False))) for p in paras
    )


def _table_for(df: pd.DataFrame, console: Console, wide: bool) -> Fitted:
    """The table fitted to the console; wider than it (--wide, or a terminal too narrow for the deciding
    columns, whose numbers are never cut) the console is made as wide as the table, and the terminal wraps
    its lines."""
    fitted = rich_table(df) if wide else rich_table(df, console.width)
    widths = (c.width or 0 for c in fitted.table.columns)
    console.width = max(console.width, table_width(widths, fitted.table.show_edge))
    return fitted


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
    """Draw `df` (its first `limit` rows; 0: all; None or FIT: as many as fit the console's height), less
    the columns its `terminal_drops` attr names (a value every row shares: layout, said by the title or
    not worth a column here; csv and json keep them)."""
    notes = list(notes)
    if drops := [c for c in df.attrs.get("terminal_drops", ()) if c in df.columns]:
        attrs = df.attrs
        df = df.drop(columns=drops)
        df.attrs = attrs
    width = console.width
    option = limit != FIT
    limit = None if limit == FIT else limit
    if limit is None and not timed(df):
        limit = 0
    total = len(df)
    rows = total if limit == 0 or limit is None else min(limit, total)
    if limit is None:  # lines besides the table's: title, notes, the two notes of what was left out, prompt
        around = _text_lines(console, title, keep="")
        around += sum(_text_lines(console, n, "note: ", keep="\t") for n in notes)
        around += 2 * _text_lines(console, rows_left_out(total, total, console.height, option), "note: ") + 1
        rows = min(total, max(FEWEST_ROWS, console.height - around - 4))  # 4: borders and a header line
    fitted = _table_for(df.head(rows) if rows < total else df, console, wide)
    for _ in range(3) if limit is None else ():  # rows or headers taller than a line: take rows off
        over = len(console.render_lines(fitted.table, console.options)) + around - console.height
        if over <= 0 or rows <= FEWEST_ROWS:
            break
        rows = max(FEWEST_ROWS, rows - over)
        fitted = _table_for(df.head(rows), console, wide)
    if title:
        print_lines(console, title, style="italic", keep="")
    console.print(fitted.table)
    if not wide:
        console.width = width  # the notes wrap at the terminal's width
    dropped = fitted.dropped
    notes += fitted.notes
    if dropped:
        notes.append(
            f"{len(dropped)} of {len(df.columns)} columns left out to fit {console.width} columns: "
            f"{', '.join(dropped)}; --wide shows them, --format csv or json every column"
        )
    if rows < total:
        notes.append(rows_left_out(total - rows, total, console.height if limit is None else None, option))
    for note in notes:
        print_lines(console, note, prefix="note: ", prefix_style="dim", keep="\t")


def say(label: str, style: str, message: str, *, lines: bool = False) -> None:
    """`label message` on stderr (`error:`, `warning:`, `note:`): plain text (never markup), control
    characters escaped, a newline too (a name quoted from outside, a file's, stays on its line) unless
    `lines` (a message meant to span lines: a program's last lines of output). On a terminal it wraps to the
    terminal's width as a table's notes do (the lines after the first indented under the message); piped
    (tests, scripts, logs) it stays one line however long, so a search finds the whole message."""
    from rich.text import Text

    keep = "\n\t" if lines else "\t"
    console = console_for(stderr=True)
    if console.is_terminal:
        print_lines(console, message, prefix=f"{label} ", prefix_style=style, keep=keep)
        return
    console.print(Text(label, style=style) + Text(" " + visible(message, keep=keep)), soft_wrap=True)


def _stderr_notes(notes: Iterable[str]) -> None:
    for note in notes:
        say("note:", "", note)


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
        json.dump(to_json(df), out, indent=1)
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
        doc: dict[str, Any] = {name: to_json(df) for name, df in tables}
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
    # a table with nothing in it is a line for people, not a header over no rows (csv and json keep it)
    notes = [*(f"{name}: none" for name, df in tables if df.empty), *notes]
    tables = [(name, df) for name, df in tables if not df.empty]
    for i, (name, df) in enumerate(tables):
        last = i == len(tables) - 1
        _render(df, console, name, notes if last else (), wide, limit)
    if not tables:
        for note in notes:
            print_lines(console, note, prefix="note: ", prefix_style="dim", keep="\t")


MARKDOWN_SPECIAL = re.compile(r"([\\`*_<>\[\]|&~])")


def markdown_text(text: str) -> str:
    """Text from outside as Markdown shows it, not as Markdown: control characters shown escaped, and every
    character that would start code, emphasis, a link, an HTML tag or comment, an entity or a cell
    backslash-escaped (a kernel's `<unnamed>` is not taken for a tag, nor `__init__` made bold)."""
    return MARKDOWN_SPECIAL.sub(r"\\\1", visible(text))


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub pipe table for pull requests: `(ns)` columns in ms, its text cells as text (markdown_text)."""
    import pandas as pd

    def cell(v: Any) -> str:
        if v is None or (isinstance(v, float) and v != v) or v is pd.NA:
            return ""
        if isinstance(v, float):
            return f"{v:,.2f}"
        if isinstance(v, int):
            return f"{v:,}"
        return markdown_text(str(v))

    cols = list(df.columns)
    heads = [c.replace("(ns)", "(ms)") if isinstance(c, str) else str(c) for c in cols]
    lines = ["| " + " | ".join(cell(h) for h in heads) + " |"]
    lines.append("|" + "|".join("---:" if df[c].dtype.kind in "iuf" else "---" for c in cols) + "|")
    for row in df.itertuples(index=False):
        values = [
            python_value(v) / 1e6
            if isinstance(c, str) and c.endswith("(ns)") and python_value(v) is not None
            else python_value(v)
            for c, v in zip(cols, row, strict=True)
        ]
        lines.append("| " + " | ".join(cell(v) for v in values) + " |")
    return "\n".join(lines) + "\n"
