"""Computed tables kept in the trace cache, and served again without pandas.

`harness kernels BIG` warm spent most of its time importing pandas and pyarrow (~0.5 s here, against
`nsys stats -r gpukernsum`'s ~2 s): reading the cached columns and aggregating them took a fifth of it. So
a table a command computed from a trace with a cache entry is also kept in that entry, as
`result.<key>.json`: its columns, each column's dtype kind, its rows as Python values, the records its
JSON output holds, and its attrs (notes, column priorities). A later command with the same options reads
it back with the standard library alone (no pandas, no pyarrow, no SQLite) and renders it.

Invalidation reuses the cache's: an entry's folder is named by the export's identity (resolved path, inode,
size, mtime, ctime, sampled content, reader version: analysis.trace.cache), so a changed export finds no
result;
an export whose write-ahead log holds changes is never served (analysis.readers.sqlite_files). The key
holds the table's name and options and a stamp of the analysis code (each module's size and mtime), so a
changed analysis finds none either. What a table depends on beyond those (pandas' and numpy's versions)
is not in the key; `harness cache --clear` drops every result with the frames.

`Rows` is what `cached` hands back: the part of a DataFrame's interface the renderers use
(harness.cli.terminal.output: columns, attrs, len, head, itertuples, a column's dtype kind and map, copy,
rename, to_csv, to_json), writing csv and json byte for byte as pandas writes the frame it was made from
(tests/test_results.py).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import hashlib
import json
import math
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from analysis import readers
from analysis.errors import AnalysisError
from analysis.readers import sqlite_files
from analysis.trace.cache import Cache, Entry, write_atomic

if TYPE_CHECKING:
    import pandas as pd

    from analysis.trace.trace import Trace

FORMAT = 2  # of the result files: bump when what they hold changes


@functools.cache
def code_stamp() -> str:
    """A hash of the path, size and mtime of every module under analysis/, sub-folders included."""
    h = hashlib.blake2b(digest_size=8)
    root = Path(__file__).resolve().parents[1]  # analysis/, above trace/
    files: list[tuple[str, os.stat_result]] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = Path(folder).relative_to(root).as_posix()
        files.extend((f"{rel}/{n}", os.stat(os.path.join(folder, n))) for n in names if n.endswith(".py"))
    for name, st in sorted(files):
        h.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def key_of(name: str, options: Mapping[str, Any]) -> str:
    text = json.dumps([FORMAT, code_stamp(), name, dict(sorted(options.items()))], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _path(entry: Entry, name: str, options: Mapping[str, Any]) -> Path:
    return entry.folder / f"result.{name}.{key_of(name, options)}.json"


@dataclass
class Kept:
    """What a command printed, kept: its titled tables, its notes, and the tables it skipped and why."""

    tables: list[tuple[str, Rows]]
    notes: list[str]
    skipped: dict[str, str] | None
    titled: bool = False  # printed as a titled list even when one table


def keep(
    trace: Trace,
    name: str,
    options: Mapping[str, Any],
    tables: Sequence[tuple[str, Any]],
    notes: Sequence[str] = (),
    skipped: Mapping[str, str] | None = None,
    *,
    titled: bool = False,
) -> bool:
    """Keep `tables` (title, DataFrame or Rows), what command `name` with `options` made of `trace`, in
    its cache entry; whether they were kept (not without a cache entry, nor when a cell, attr or column
    name is one JSON cannot hold exactly: such tables are computed each time)."""
    entry = trace.cache_entry
    if entry is None:
        return False
    try:
        data = [{"title": title, **_table(df)} for title, df in tables]
        text = json.dumps(
            {"name": name, "options": dict(options), "digest": entry.digest, "tables": data,
             "notes": list(notes), "skipped": None if skipped is None else dict(skipped), "titled": titled},
            allow_nan=True,
        )  # fmt: skip
        write_atomic(_path(entry, name, options), text.encode())
    except (TypeError, ValueError, OSError):
        return False
    return True


def _table(df: Any) -> dict[str, Any]:
    columns = list(df.columns)
    if not all(isinstance(c, str) for c in columns) or len(set(columns)) != len(columns):
        raise TypeError("column names must be distinct strings")
    rows = [[_stored(_py(v)) for v in row] for row in df.itertuples(index=False)]
    if not all(isinstance(v, str | int | float | bool | dict) or v is None for row in rows for v in row):
        raise TypeError("timestamps, lists: computed each time")
    return {
        "columns": columns,
        "kinds": [df[c].dtype.kind for c in columns],
        "rows": rows,
        "records": json.loads(df.to_json(orient="records", double_precision=15)),
        "attrs": dict(df.attrs),
    }


def cached(
    path: Path, name: str, options: Mapping[str, Any], notes: list[str] | None = None, *, traces: bool = False
) -> Kept | None:
    """What command `name` with `options` printed for the nsys export at `path`, as `keep` kept it; None
    when there is none (not an SQLite export, no cache entry, the export or the analysis changed since,
    caching off), or what is kept is not whole or not this export's (edited, or copied from another's
    entry: deleted, said in `notes`, and so computed again). `notes` also gets what opening the entry found
    wrong (analysis.trace.cache). `traces`: a file that is not SQLite is looked up as a Kineto trace (for
    its health verdict: a Kineto trace's tables are computed each time)."""
    said = notes if notes is not None else []
    try:
        if not stat.S_ISREG(os.stat(path).st_mode) or sqlite_files.pending(path):
            return None  # a pipe is not opened twice; an export with changes in its log is not cached
        with open(path, "rb") as f:
            sqlite = f.read(len(sqlite_files.MAGIC)) == sqlite_files.MAGIC
        if not (sqlite or traces):
            return None
        cache = Cache()
        if cache.limit <= 0:
            return None
        entry = cache.entry(path, readers.NSYS_VERSION if sqlite else readers.KINETO_VERSION)
        meta = entry.meta()
        said += [n for n in entry.notes if n not in said]
        if meta is None:
            return None
        kept = _path(entry, name, options)
        data = json.loads(kept.read_bytes())
    except (OSError, ValueError, KeyError, TypeError, AnalysisError):
        return None
    if not isinstance(data, dict) or data.get("digest") != entry.digest:  # each file of an entry holds it
        why: str | None = "was not written for it (another export's, or edited)"
    else:
        why = _damaged(data)
    if why is not None:
        with contextlib.suppress(OSError):
            kept.unlink()
        said.append(f"the {name} table kept in the cache for {path} {why}: deleted, and computed again")
        return None
    tables = [
        (t["title"], Rows(t["columns"], t["kinds"], _loaded(t["rows"]), t["records"], t["attrs"]))
        for t in data["tables"]
    ]
    return Kept(tables, list(data["notes"]), data["skipped"], bool(data.get("titled", False)))


def _damaged(data: dict[str, Any]) -> str | None:
    """Why a kept table's file is not whole (None: it is): a part of the wrong shape (a row shorter than
    its columns, a record missing)."""
    tables, notes, skipped = data.get("tables"), data.get("notes"), data.get("skipped")
    if (
        not isinstance(tables, list)
        or not _texts(notes)
        or not (skipped is None or isinstance(skipped, dict))
    ):
        return "is damaged (its tables or notes are not lists)"
    for t in tables:
        if not isinstance(t, dict) or not isinstance(t.get("title"), str):
            return "is damaged (a table without its title)"
        columns, kinds, rows, records = t.get("columns"), t.get("kinds"), t.get("rows"), t.get("records")
        if not _texts(columns) or not _texts(kinds) or len(kinds) != len(columns):
            return f"is damaged (table {t['title']!r}: its columns and their kinds do not match)"
        if not isinstance(rows, list) or not all(
            isinstance(r, list) and len(r) == len(columns) for r in rows
        ):
            return f"is damaged (table {t['title']!r}: a row is not as long as its {len(columns)} columns)"
        if not isinstance(records, list) or len(records) != len(rows) or not isinstance(t.get("attrs"), dict):
            return f"is damaged (table {t['title']!r}: its records or attributes do not match its rows)"
    return None


def _texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


class _Missing:
    """pandas' NA (a nullable integer column's missing value) as the renderers see it: printed `<NA>`,
    empty in csv; JSON's records hold null."""

    def __repr__(self) -> str:
        return "<NA>"


NA = _Missing()


def _stored(value: Any) -> Any:
    return {"na": None} if type(value).__name__ == "NAType" else value


def _loaded(rows: list[list[Any]]) -> list[list[Any]]:
    return [[NA if isinstance(v, dict) else v for v in row] for row in rows]


def _py(value: Any) -> Any:
    item = getattr(value, "item", None)
    return item() if callable(item) else value


@dataclass(frozen=True)
class Kind:
    kind: str


class Column:
    """One column of `Rows`: its values and a dtype with pandas' kind letter."""

    def __init__(self, values: list[Any], kind: str) -> None:
        self.values = values
        self.dtype = Kind(kind)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def map(self, fn: Callable[[Any], Any]) -> Column:
        return Column([fn(v) for v in self.values], "O")

    def any(self) -> bool:
        return any(self.values)


class Rows:
    """A computed table without pandas: columns, rows of Python values, the JSON records, attrs."""

    def __init__(
        self,
        columns: Sequence[str],
        kinds: Sequence[str],
        rows: Sequence[Sequence[Any]],
        records: Sequence[dict[str, Any]],
        attrs: Mapping[str, Any],
    ) -> None:
        self.columns = list(columns)
        self.kinds = list(kinds)
        self.rows = [tuple(r) for r in rows]
        self.records = list(records)
        self.attrs = dict(attrs)

    @classmethod
    def computed(
        cls,
        columns: Sequence[str],
        kinds: Sequence[str],
        rows: Sequence[Sequence[Any]],
        attrs: Mapping[str, Any],
    ) -> Rows:
        """A table computed without pandas. Its JSON records are what `DataFrame.to_json(orient="records",
        double_precision=15)` writes for a frame of these values, for the values tables here hold: integers,
        texts and floats rounded to one decimal (pandas writes 15 decimals, which read back as the same
        float); NaN as null."""
        records = [{c: _json_value(v) for c, v in zip(columns, row, strict=True)} for row in rows]
        return cls(columns, kinds, rows, records, attrs)

    def frame(self) -> pd.DataFrame:
        """The table as a pandas DataFrame: int64, float64 and object columns, as the kinds say; an integer
        column with a missing value nullable (Int64, pandas' NA), as it was computed."""
        import numpy as np
        import pandas as pd

        dtypes = {"i": np.int64, "f": np.float64, "b": bool}
        data = {}
        for i, c in enumerate(self.columns):
            values, dtype = [r[i] for r in self.rows], dtypes.get(self.kinds[i], object)
            if any(v is NA for v in values):
                values = [pd.NA if v is NA else v for v in values]
                dtype = "Int64" if self.kinds[i] == "i" else dtype
            data[c] = pd.Series(values, dtype=dtype)
        out = pd.DataFrame(data, columns=self.columns)
        out.attrs.update(self.attrs)
        return out

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, column: str) -> Column:
        i = self.columns.index(column)
        return Column([r[i] for r in self.rows], self.kinds[i])

    def __setitem__(self, column: str, values: Column) -> None:
        i = self.columns.index(column)
        self.rows = [(*r[:i], v, *r[i + 1 :]) for r, v in zip(self.rows, values, strict=True)]

    @property
    def empty(self) -> bool:
        return not self.rows

    def head(self, n: int = 5) -> Rows:
        return Rows(self.columns, self.kinds, self.rows[:n], self.records[:n], self.attrs)

    def copy(self) -> Rows:
        return self.head(len(self.rows))

    def rename(self, columns: Callable[[str], str]) -> Rows:
        return Rows([columns(c) for c in self.columns], self.kinds, self.rows, self.records, self.attrs)

    def itertuples(self, index: bool = False) -> Iterator[tuple[Any, ...]]:
        if index:
            raise ValueError("Rows have no index")
        return iter(self.rows)

    def to_json(self, orient: str = "records", double_precision: int = 15) -> str:
        """The records as `DataFrame.to_json(orient="records", double_precision=15)` gave them."""
        if orient != "records" or double_precision != 15:
            raise ValueError("Rows keep the records of to_json(orient='records', double_precision=15)")
        return json.dumps(self.records)

    def to_csv(self, out: TextIO, index: bool = False, lineterminator: str = "\n") -> None:
        """As `DataFrame.to_csv(out, index=False)`: csv's minimal quoting, floats as repr, NaN and None
        empty."""
        if index:
            raise ValueError("Rows have no index")
        writer = csv.writer(out, lineterminator=lineterminator, quoting=csv.QUOTE_MINIMAL)
        writer.writerow(self.columns)
        for row in self.rows:
            writer.writerow([_csv_cell(v) for v in row])


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not isinstance(value, bool):
        return float(f"{value:.15f}") if math.isfinite(value) else None
    return value


def _csv_cell(value: Any) -> Any:
    if value is None or value is NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(value)
    return value
