"""An nsys export's NVTX ranges (NVTX_EVENTS) as the trace model's `nvtx` frame: whole, or a chunk of
rowids at a time with each chunk's names resolved on their own (`range_blocks`).

A chunk is what `NsysReader.scan` reads at once (CHUNK_ROWIDS rowids): its integer columns, then its
texts grouped by SQLite (one Python string per distinct text of the chunk) and its text ids looked up in
StringIds (kept across chunks). A chunk's names and domains are Categoricals of the names it uses,
sorted, as the whole frame's are of all: the same name and domain on every row either way. `harness
timeline` writes the ranges as they come (7.1M ranges on a 4M-kernel export: the whole frame was ~400 MB
at the peak), and the cache is filled a chunk at a time in one scan of the table.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from analysis.readers import NULL
from analysis.readers.global_ids import PROCESS_MASK

if TYPE_CHECKING:
    import pandas as pd

NsysReader = Any  # analysis.readers.nsys.NsysReader, not imported even for types: nsys imports this module

NVTX = "NVTX_EVENTS"
PUSHPOP_TYPES = (59, 70)  # NVTX_EVENTS.eventType of push/pop and start/end ranges (NVTX and NVTXT)
STARTEND_TYPES = (60, 71)
FRAME_NVTX = ("range_id", "start", "end", "global_tid", "pushpop", "payload", "name", "domain")
# ids of strings and domains as int32 (-1: none), push/pop as a bool: millions of ranges are read here
NARROW = {"pushpop": np.bool_, "domain_id": np.int32, "text_id": np.int32}


def _plan(reader: NsysReader, columns: Sequence[str] | None) -> tuple[set[str], dict[str, str], str]:
    """(the frame's columns asked, range_id among them; the SQL of each column to scan; the WHERE)."""
    asked = set(FRAME_NVTX if columns is None else columns) | {"range_id"}
    cols = reader.columns(NVTX)
    types = (*PUSHPOP_TYPES, *STARTEND_TYPES)
    where = f"eventType IN ({', '.join(map(str, types))})" if "eventType" in cols else ""
    payload_cols = [c for c in ("int64Value", "uint64Value", "int32Value", "uint32Value") if c in cols]
    int32 = "CASE WHEN {0} BETWEEN 0 AND 2147483647 THEN {0} ELSE -1 END"
    exprs = {
        "range_id": "rowid",
        "start": "start",
        "end": "end",
        "pushpop": f"eventType IN ({', '.join(map(str, PUSHPOP_TYPES))})",
        "global_tid": "globalTid",
        "domain_id": int32.format("domainId") if "domainId" in cols else "0",
        "text_id": int32.format("textId") if "textId" in cols else "-1",
        "payload": f"coalesce({', '.join(payload_cols)}, NULL)" if payload_cols else "NULL",
    }
    needs = {"name": {"text_id"}, "domain": {"domain_id", "global_tid"}}
    wanted = asked.union(*(needs.get(c, set()) for c in asked))
    return asked, {c: e for c, e in exprs.items() if c in wanted}, where


def ranges(reader: NsysReader, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """NVTX push/pop and start/end ranges, one row each, names resolved and domains attached, read in
    one scan: `NsysReader.nvtx_ranges`."""
    import pandas as pd

    asked, exprs, where = _plan(reader, columns)
    col = reader.scan(NVTX, exprs, where, dtypes=NARROW)
    if not len(col["range_id"]):
        out = {c: col[c] for c in ("range_id", "start", "end", "global_tid") if c in asked}
        empty = {
            "pushpop": pd.Series(dtype=bool),
            "payload": pd.Series(dtype="Int64"),
            "name": pd.Categorical([]),
            "domain": pd.Categorical([]),
        }
        return pd.DataFrame({**out, **{c: v for c, v in empty.items() if c in asked}})
    return pd.DataFrame(_frame_columns(reader, col, asked, where), copy=False)


def range_blocks(reader: NsysReader, columns: Sequence[str]) -> Iterator[dict[str, Any]]:
    """`columns` of the ranges a chunk of rowids at a time, as `ranges` has them (pushpop as numpy
    booleans, payload as a pandas IntegerArray, name and domain as pandas Categoricals; the rest int64),
    never the whole table at once."""
    asked, exprs, where = _plan(reader, columns)
    for chunk in reader.scan_blocks(NVTX, exprs, where):
        for name, kind in NARROW.items():  # as `scan` narrows them
            if name in chunk:
                raw = chunk[name]
                chunk[name] = np.where(raw == NULL, -1 if kind is np.int32 else 0, raw).astype(kind)
        out = _frame_columns(reader, chunk, asked, where)
        yield {c: out[c] for c in columns}


def _frame_columns(
    reader: NsysReader, col: dict[str, np.ndarray], asked: set[str], where: str
) -> dict[str, Any]:
    """The frame's columns from scanned ones (`_plan`'s), rows as they are."""
    import pandas as pd

    out: dict[str, Any] = {c: col[c] for c in ("range_id", "start", "end", "global_tid") if c in asked}
    if "end" in asked:
        open_ = col["end"] == NULL
        if open_.any():
            col["end"][open_] = reader.last_nvtx_time()
    if "pushpop" in asked:
        out["pushpop"] = col["pushpop"]
    if "payload" in asked:
        payload = col.pop("payload")
        out["payload"] = pd.arrays.IntegerArray(payload, payload == NULL)  # the values, not a copy
    if "name" in asked:
        out["name"] = _names(reader, col, where)
    if "domain" in asked:
        out["domain"] = _domains(reader, col)
    return out


def _names(reader: NsysReader, col: dict[str, np.ndarray], where: str) -> pd.Categorical:
    """The name of each range (scanned columns range_id and text_id): the registered string where it has a
    text id, else its text, else ""; categories the names used, sorted."""
    import pandas as pd

    n = len(col["range_id"])
    rowids = col["range_id"]
    if "text" in reader.columns(NVTX) and (rowids[1:] > rowids[:-1]).all():  # scans read in rowid order
        text, texts = reader.column_codes(NVTX, "text", where, rowids)
    else:
        text, texts = np.full(n, -1, dtype=np.int32), []
    text_id = col.pop("text_id")
    id_names = reader.strings_of(np.unique(text_id[text_id >= 0]))
    # a name per row as a code into texts + the names of text ids + "": the registered string where
    # the row has a text id, else its text, else ""
    code = text
    code[code < 0] = len(texts) + len(id_names)
    if id_names:
        by_id = pd.Index(np.fromiter(id_names, dtype=np.int64, count=len(id_names))).get_indexer(text_id)
        hit = by_id >= 0
        code[hit] = len(texts) + by_id[hit]
        del by_id, hit
    del text, text_id
    values = [*texts, *id_names.values(), ""]
    used = sorted({values[i] for i in np.unique(code)})  # the categories astype("category") makes
    where_in = {v: i for i, v in enumerate(used)}
    lut = np.array([where_in.get(v, -1) for v in values], dtype=np.int32)
    return pd.Categorical.from_codes(lut[code], categories=used)


def _domains(reader: NsysReader, col: dict[str, np.ndarray]) -> pd.Categorical:
    """The domain of each range (scanned columns domain_id and global_tid), as pd.Categorical of the names
    (NA outside named domains) would make it, without an object per range."""
    import pandas as pd

    n = len(col["range_id"])
    dom = col.pop("domain_id")
    domain_of = np.full(n, -1, dtype=np.int32)
    rows_of: dict[str, np.ndarray] = {}
    if domains := reader.nvtx_domains():
        process = col["global_tid"] & PROCESS_MASK
        for (dom_id, pid), name in domains.items():
            rows = (dom == dom_id) & (process == pid)
            if rows.any():
                rows_of[name] = rows_of[name] | rows if name in rows_of else rows
        del process
    del dom
    for i, name in enumerate(sorted(rows_of)):
        domain_of[rows_of[name]] = i
    return pd.Categorical.from_codes(domain_of, categories=sorted(rows_of) or pd.Index([], dtype=object))
