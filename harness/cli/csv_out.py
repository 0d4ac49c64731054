"""Several tables as CSV for scripts: one tidy file with a `table` column naming each row's table (the
default of `diff --format csv`), or one file per table in a folder (`--out DIR`)."""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from harness.cli.common import make_folders, note, refuse_inputs, warn, write_text
from harness.cli.terminal.output import Format, emit
from harness.core.errors import HarnessError, os_reason

if TYPE_CHECKING:
    import pandas as pd

TABLE = "table"


def tidy(tables: Sequence[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """The tables stacked: `table` (the title) first, then the union of their columns in first-seen order."""
    import pandas as pd

    parts = [df.assign(**{TABLE: title}) for title, df in tables]
    if not parts:
        return pd.DataFrame(columns=[TABLE])
    out = pd.concat(parts, ignore_index=True, sort=False)
    return out[[TABLE, *(c for c in out.columns if c != TABLE)]]


def write_tidy(tables: Sequence[tuple[str, pd.DataFrame]], file: TextIO | None = None) -> None:
    emit(tidy(tables), Format.csv, file=file or sys.stdout)


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:60] or "table"


NAMED = re.compile(r"\d{2}-[a-z0-9-]*\.csv")  # the names write_folder gives its files


def write_folder(
    tables: Sequence[tuple[str, pd.DataFrame]], folder: Path, inputs: Sequence[str | Path | None] = ()
) -> list[Path]:
    """One CSV per table, `NN-title.csv` in table order (each written as analysis.outputs writes a file;
    none of them one of `inputs`, the files the command read); the files written."""
    paths = [folder / f"{i:02d}-{slug(title)}.csv" for i, (title, _) in enumerate(tables, 1)]
    for path in paths:
        refuse_inputs(path, inputs, "--out")
    make_folders(folder)
    try:
        for path, (_, df) in zip(paths, tables, strict=True):
            text = io.StringIO()
            emit(df, Format.csv, file=text)
            write_text(path, text.getvalue())
    except OSError as e:
        raise HarnessError(
            f"cannot write CSV files into {folder}: {os_reason(Path(folder), e)}", exit_code=2
        ) from None
    return paths


def stale(folder: Path, written: Sequence[Path]) -> list[str]:
    """The files of `folder` named as write_folder names its files that it did not write this time."""
    mine = {p.name for p in written}
    try:
        names = sorted(p.name for p in folder.iterdir())
    except OSError:
        return []
    return [n for n in names if NAMED.fullmatch(n) and n not in mine]


def write_csv(
    tables: Sequence[tuple[str, pd.DataFrame]],
    out: Path | None,
    notes: Sequence[str],
    inputs: Sequence[str | Path | None] = (),
) -> None:
    """One tidy CSV on stdout (a `table` column), or with `out` one file per table there; notes on stderr."""
    if out is None:
        write_tidy(tables)
    else:
        written = write_folder(tables, out, inputs)
        for path in written:
            note(f"wrote {path}")
        left = stale(out, written)
        if left:  # another command's tables beside these: a script reading the folder would take them too
            warn(f"{out} also holds {', '.join(left)}, not written by this command (an earlier one's): "
                 "remove them, or give an empty folder")  # fmt: skip
    for line in notes:
        note(line)
