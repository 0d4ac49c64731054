"""Open an Nsight Systems SQLite export read-only and read its tables as columns.

This is the only module that writes SQL against an export. It codes against the tables and columns
present, not a schema version: newer exports (schema 3.x) name the metadata table META_DATA_EXPORT instead
of EXPORT_META_DATA, add columns (mangledName, greenContextId) and leave out tables that have no rows.

Speed: big exports hold millions of rows. Fetching them row by row as Python tuples (what pandas.read_sql
does) is what makes the naive way slow, and SQLite's GROUP BY sorts every row. So SQLite scans each table
once and hands back each needed column as one comma-joined string built in C (group_concat, in chunks of
rowids), numpy parses it, and pandas aggregates with hash tables. Nothing is written to the user's file:
the connection is opened with mode=ro.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import sqlite3
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd

from harness.errors import ExportError

SQLITE_MAGIC = b"SQLite format 3\x00"
META_TABLES = ("EXPORT_META_DATA", "META_DATA_EXPORT")
NULL = -9223372036854775807  # stands for SQL NULL in integer columns read by `scan`
CHUNK_ROWIDS = 250_000  # rows per query: bounds the joined strings
SCAN_THREADS = min(4, os.cpu_count() or 1)
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
NVTX = "NVTX_EVENTS"
OSRT = "OSRT_API"
# NVTX_EVENTS.eventType: push/pop and start/end ranges (NVTX and NVTXT), domain creation
PUSHPOP_TYPES = (59, 70)
STARTEND_TYPES = (60, 71)
DOMAIN_CREATE = 75
OSRT_CLASS = 27  # OSRT_API.eventClass of OS runtime calls (what osrtsum counts)

# Kernel columns by field name. Grid and block dimensions are packed into one integer each (CUDA caps
# gridY/gridZ at 65535 and block dimensions at 1024 x 1024 x 64), so one value keys a launch shape.
KERNEL_FIELDS = {
    "start": "start",
    "end": "end",
    "duration": "end - start",
    "correlation_id": "correlationId",
    "global_pid": "globalPid",
    "device_id": "deviceId",
    "stream_id": "streamId",
    "grid": "(gridX << 32) + (gridY << 16) + gridZ",
    "block": "(blockX << 22) + (blockY << 11) + blockZ",
}
KERNEL_NAMES = {"demangled": "demangledName", "base": "shortName", "mangled": "mangledName"}


class Export:
    """One open export: its path, SQLAlchemy engine, producer metadata and the tables it holds."""

    def __init__(self, path: Path, engine: Any, tables: set[str]) -> None:
        self.path = path
        self.engine = engine
        self.tables = tables
        self._columns: dict[str, set[str]] = {}
        self.meta = self._read_meta()
        self.schema_version: str | None = self.meta.get("EXPORT_SCHEMA_VERSION")
        self.producer: str | None = self.meta.get("EXPORT_PRODUCT_VERSION")

    def __repr__(self) -> str:
        return f"Export({str(self.path)!r}, schema={self.schema_version})"

    def __enter__(self) -> Export:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    # --- what is there ---------------------------------------------------------------------------

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            if table not in self.tables:
                return set()
            rows = self._rows("SELECT name FROM pragma_table_info(:t)", {"t": table})
            self._columns[table] = {r[0] for r in rows}
        return self._columns[table]

    def count(self, table: str) -> int:
        if table not in self.tables:
            return 0
        return int(self._rows(f"SELECT count(*) FROM {_ident(table)}")[0][0])

    def require(self, table: str, what: str) -> None:
        """Raise ExportError ("no WHAT in PATH: ...") unless `table` exists and has rows."""
        if self.count(table) == 0:
            hint = {
                KERNEL: "profile on a GPU with --trace=cuda",
                RUNTIME: "profile on a GPU with --trace=cuda",
                MEMCPY: "profile on a GPU with --trace=cuda",
                NVTX: "profile with --trace=nvtx and a program that emits NVTX ranges",
                OSRT: "profile with --trace=osrt",
            }.get(table, "profile with the matching --trace option")
            raise ExportError(f"no {what} in {self.path}: {hint}")

    # --- raw SQL (bound parameters; table and column names only from this module) ----------------

    def _rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        from sqlalchemy import exc, text

        try:
            with self.engine.connect() as conn:
                return [tuple(r) for r in conn.execute(text(sql), dict(params or {}))]
        except exc.DBAPIError as e:
            raise _corrupt(self.path, e.orig) from None

    def _read_meta(self) -> dict[str, str]:
        for table in META_TABLES:
            if table in self.tables:
                names = [c for c in ("name", "value") if c in self.columns(table)]
                if len(names) == 2:
                    return {str(k): str(v) for k, v in self._rows(f"SELECT name, value FROM {table}")}
        return {}

    def scan(
        self, table: str, exprs: Mapping[str, str], where: str = "", params: Mapping[str, Any] | None = None
    ) -> pd.DataFrame:
        """Integer columns `exprs` (name -> SQL expression) of every row of `table` matching `where`.

        One query per chunk of rowids keeps the joined strings small. NULL reads as the NULL sentinel;
        callers turn it into NA where a column may hold it.
        """
        names = list(exprs)
        empty = pd.DataFrame({n: np.empty(0, dtype=np.int64) for n in names})
        if table not in self.tables:
            return empty
        lo, hi = self._rows(f"SELECT min(rowid), max(rowid) FROM {_ident(table)}")[0]
        if lo is None:
            return empty
        cond = f" AND ({where})" if where else ""
        chunks = range(int(lo), int(hi) + 1, CHUNK_ROWIDS)

        concat = ", ".join(f"group_concat(ifnull({exprs[n]}, {NULL}))" for n in names)
        sql = f"SELECT {concat} FROM {_ident(table)} WHERE rowid BETWEEN :lo AND :hi{cond}"

        def read(first: int) -> list[np.ndarray | None]:
            row = self._rows(sql, {**(params or {}), "lo": first, "hi": first + CHUNK_ROWIDS - 1})[0]
            return [_parse_ints(b) if b is not None else np.empty(0, dtype=np.int64) for b in row]

        # SQLite does the work with the GIL released: chunks on separate connections scan in parallel
        workers = min(len(chunks), SCAN_THREADS)
        if workers > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(workers) as pool:
                parts = list(pool.map(read, chunks))
        else:
            parts = [read(first) for first in chunks]
        columns = {}
        for i, n in enumerate(names):
            columns[n] = np.concatenate([p[i] for p in parts])
            for p in parts:
                p[i] = None  # free each chunk once joined
        return pd.DataFrame(columns, copy=False)

    def strings(self, ids: Iterable[int]) -> dict[int, str]:
        """StringIds values of `ids` (those that exist)."""
        wanted = sorted({int(i) for i in ids if i is not None and i != NULL})
        if not wanted or "StringIds" not in self.tables:
            return {}
        if len(wanted) > 500:
            rows = self._rows("SELECT id, value FROM StringIds")
        else:
            marks = ", ".join(f":i{k}" for k in range(len(wanted)))
            rows = self._rows(
                f"SELECT id, value FROM StringIds WHERE id IN ({marks})",
                {f"i{k}": v for k, v in enumerate(wanted)},
            )
        return {int(i): str(v) for i, v in rows}

    # --- the tables the reports read ---------------------------------------------------------------

    def kernel_rows(
        self, fields: Iterable[str], names: str = "demangled", window: tuple[int, int] | None = None
    ) -> pd.DataFrame:
        """Kernels with `fields` (KERNEL_FIELDS keys, plus "name_id"); names demangled, base or mangled.

        A mangled name falls back to the demangled one where the column is absent or NULL.
        """
        exprs = {f: KERNEL_FIELDS[f] for f in fields if f != "name_id"}
        if "name_id" in fields:
            col = KERNEL_NAMES[names]
            if col not in self.columns(KERNEL):
                col = "demangledName"
            exprs["name_id"] = f"coalesce({col}, demangledName)" if col != "demangledName" else col
        return self.scan(KERNEL, exprs, *_window(window))

    def runtime_rows(self, window: tuple[int, int] | None = None) -> pd.DataFrame:
        """CUDA runtime calls: correlation_id, start, end, global_tid, name_id."""
        return self.scan(
            RUNTIME,
            {
                "correlation_id": "correlationId",
                "start": "start",
                "end": "end",
                "global_tid": "globalTid",
                "name_id": "nameId",
            },
            *_window(window),
        )

    def memcpy_rows(self, window: tuple[int, int] | None = None) -> pd.DataFrame:
        """Memory copies: copy_kind, bytes, start, end, duration, stream_id, correlation_id."""
        exprs = {"copy_kind": "copyKind", "bytes": "bytes", **_MEMOP_FIELDS}
        return self.scan(MEMCPY, exprs, *_window(window))

    def memset_rows(self, window: tuple[int, int] | None = None) -> pd.DataFrame:
        """Memory sets: bytes, start, end, duration, stream_id, correlation_id."""
        return self.scan(MEMSET, {"bytes": "bytes", **_MEMOP_FIELDS}, *_window(window))

    def osrt_rows(self) -> pd.DataFrame:
        where = "eventClass = :cls" if "eventClass" in self.columns(OSRT) else ""
        return self.scan(OSRT, {"name_id": "nameId", "duration": "end - start"}, where, {"cls": OSRT_CLASS})

    def nvtx_range_rows(self) -> pd.DataFrame:
        """NVTX push/pop and start/end ranges, one row each, names resolved and domains attached.

        Columns: range_id (rowid), start, end (the export's last timestamp for a range never closed),
        event_type, global_tid, domain_id, payload (Int64, NA when none), name (text), domain (text or NA).
        """
        cols = self.columns(NVTX)
        types = (*PUSHPOP_TYPES, *STARTEND_TYPES)
        where = f"eventType IN ({', '.join(map(str, types))})"
        if NVTX not in self.tables:
            where = ""
        payload_cols = [c for c in ("int64Value", "uint64Value", "int32Value", "uint32Value") if c in cols]
        exprs = {
            "range_id": "rowid",
            "start": "start",
            "end": "end",
            "event_type": "eventType",
            "global_tid": "globalTid",
            "domain_id": "domainId" if "domainId" in cols else "0",
            "text_id": "textId" if "textId" in cols else "NULL",
            "payload": f"coalesce({', '.join(payload_cols)}, NULL)" if payload_cols else "NULL",
        }
        df = self.scan(NVTX, exprs, where)
        if df.empty:
            return df.assign(name=pd.Series(dtype=object), domain=pd.Series(dtype=object))
        last = self._rows(f"SELECT max(max(start), ifnull(max(end), 0)) FROM {NVTX}")[0][0]
        df["end"] = df["end"].where(df["end"] != NULL, int(last))
        df["payload"] = df["payload"].astype("Int64").mask(df["payload"] == NULL)
        texts = self._column_text(NVTX, "text", where) if "text" in cols else [None] * len(df)
        id_names = self.strings(df.loc[df["text_id"] != NULL, "text_id"].unique())
        by_id = df["text_id"].map(id_names)
        named = by_id.where(by_id.notna(), pd.Series(texts, index=df.index, dtype=object))
        del texts
        df["name"] = named.astype("category")
        domain = np.full(len(df), None, dtype=object)
        if domains := self.nvtx_domains():
            process = df["global_tid"].to_numpy() & ~0xFFFFFF
            dom = df["domain_id"].to_numpy()
            for (dom_id, pid), name in domains.items():
                domain[(dom == dom_id) & (process == pid)] = name
        df["domain"] = pd.Categorical(domain)
        return df.drop(columns=["text_id"])

    def nvtx_domains(self) -> dict[tuple[int, int], str]:
        """(domainId, process part of globalTid) -> domain name, from the domain-create events."""
        if NVTX not in self.tables or "domainId" not in self.columns(NVTX):
            return {}
        rows = self._rows(
            f"SELECT domainId, globalTid, text FROM {NVTX} WHERE eventType = :t AND text IS NOT NULL "
            "ORDER BY start",
            {"t": DOMAIN_CREATE},
        )
        out: dict[tuple[int, int], str] = {}
        for dom, gtid, name in rows:
            out.setdefault((int(dom), int(gtid or 0) & ~0xFFFFFF), str(name))
        return out

    def thread_names(self) -> dict[int, str]:
        """globalTid -> thread name."""
        if "ThreadNames" not in self.tables:
            return {}
        rows = self._rows(
            "SELECT t.globalTid, s.value FROM ThreadNames AS t JOIN StringIds AS s ON s.id = t.nameId"
        )
        return {int(g): str(v) for g, v in rows if g is not None}

    def time_span(self) -> tuple[int, int] | None:
        """First and last timestamp of the kernels, if any."""
        if not self.count(KERNEL):
            return None
        lo, hi = self._rows(f"SELECT min(start), max(end) FROM {KERNEL}")[0]
        return int(lo), int(hi)

    def _column_text(self, table: str, column: str, where: str) -> list[str | None]:
        """A text column in rowid order (NULL as None): one string joined by SQLite, split here."""
        cond = f" WHERE {where}" if where else ""
        col = _ident(column)
        # char(30) (record separator) joins the values; a value holding one falls back to row by row
        blob, n = self._rows(
            f"SELECT group_concat(ifnull({col}, ''), char(30)), count(*) FROM {_ident(table)}{cond}"
        )[0]
        values = blob.split("\x1e") if blob is not None else []
        if len(values) != n:
            rows = self._rows(f"SELECT {col} FROM {_ident(table)}{cond} ORDER BY rowid")
            return [r[0] for r in rows]
        return [v if v else None for v in values]


_MEMOP_FIELDS = {
    "start": "start",
    "end": "end",
    "duration": "end - start",
    "stream_id": "streamId",
    "correlation_id": "correlationId",
}


def _window(window: tuple[int, int] | None) -> tuple[str, dict[str, int]]:
    """A WHERE clause (and its parameters) for rows starting inside [lo, hi]."""
    if window is None:
        return "", {}
    return "start BETWEEN :w_lo AND :w_hi", {"w_lo": int(window[0]), "w_hi": int(window[1])}


def _ident(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise ValueError(f"not an identifier: {name!r}")
    return name


def _parse_ints(blob: str) -> np.ndarray:
    return np.fromstring(blob, dtype=np.int64, sep=",")


def _corrupt(path: Path, err: BaseException | None) -> ExportError:
    why = str(err).splitlines()[0] if err else "unreadable"
    return ExportError(f"{path} is corrupt or truncated ({why}): export it again from the .nsys-rep")


def _check_header(path: Path) -> None:
    try:
        with path.open("rb") as f:
            head = f.read(100)
    except OSError as e:
        raise ExportError(f"cannot read {path}: {e.strerror}") from None
    if not head.startswith(SQLITE_MAGIC):
        raise ExportError(
            f"{path} is not an SQLite file: pass the .sqlite export of an Nsight Systems report "
            "(nsys export --type sqlite REPORT.nsys-rep)"
        )
    if len(head) < 100:
        raise ExportError(f"{path} is truncated ({len(head)} bytes): export it again from the .nsys-rep")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    header_valid = head[24:28] == head[92:96]
    size = path.stat().st_size
    if header_valid and pages and size < pages * page_size:
        raise ExportError(
            f"{path} is truncated ({size:,} of {pages * page_size:,} bytes): "
            "export it again from the .nsys-rep"
        )


_M_MMAP_THRESHOLD = -3  # glibc malloc.h


@functools.cache
def _return_freed_buffers() -> None:
    """Have glibc serve allocations of 1 MiB and more with mmap, so freed chunk buffers leave the process.

    scan() parses chunks on worker threads; with glibc's per-thread arenas and its self-raising mmap
    threshold, the freed buffers otherwise stay resident (1M kernels, `nvtx-gpu`: 430 MB peak, not 370 MB).
    """
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, 1 << 20)


def open_export(path: str | Path) -> Export:
    """Open `path` (an nsys SQLite export) read-only, or raise ExportError saying what is wrong."""
    from sqlalchemy import create_engine, exc, text
    from sqlalchemy.pool import QueuePool

    path = Path(path)
    if not path.exists():
        raise ExportError(f"no such export: {path}")
    if path.is_dir():
        raise ExportError(f"{path} is a folder: pass the .sqlite export inside it")
    if path.suffix == ".nsys-rep":
        raise ExportError(
            f"{path} is an nsys report, not an export: convert it with `nsys export --type sqlite`"
        )
    _check_header(path)
    _return_freed_buffers()
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(uri, uri=True, check_same_thread=False)

    # a small pool, not one shared connection: scan() reads chunks on several threads at once
    engine = create_engine("sqlite://", creator=connect, poolclass=QueuePool, pool_size=SCAN_THREADS)
    try:
        with engine.connect() as conn:
            tables = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))}
    except exc.DBAPIError as e:
        engine.dispose()
        raise _corrupt(path, e.orig) from None
    if "StringIds" not in tables and not tables & set(META_TABLES):
        engine.dispose()
        raise ExportError(
            f"{path} is an SQLite database but not an Nsight Systems export (no StringIds table)"
        )
    return Export(path, engine, tables)
