"""Read an Nsight Systems SQLite export into the frames of the trace model (`analysis.trace.frames.FRAMES`).

This module, analysis.readers.nsys_columns (each column's SQL) and analysis.readers.nsys_sql (the queries
and scans) are the only ones that write SQL against an export; analysis.readers.nsys_open opens one. It
codes against the tables and columns present, not a schema version: newer exports (schema 3.x) name the
metadata table META_DATA_EXPORT instead of EXPORT_META_DATA, add columns (mangledName, greenContextId) and
leave out tables that have no rows.

Speed: big exports hold millions of rows. Fetching them row by row as Python tuples (what pandas.read_sql
does) is what makes the naive way slow, and SQLite's GROUP BY sorts every row. So SQLite scans each table
once and hands back each needed column as one comma-joined string built in C (group_concat, in chunks of
rowids), numpy parses it, and pandas aggregates with hash tables. Nothing is written to the user's file
or beside it: the connection is opened read-only, as analysis.readers.sqlite_files decides (mode=ro;
immutable=1 for a WAL database with no changes in its log; a private copy for one whose log holds changes
and has no index beside it).

Malformed values: a chunk whose joined string does not parse to one integer per row (a REAL or TEXT in an
integer column) is read again with such values turned into NULL, so one bad row costs its own row only.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from textwrap import shorten
from typing import TYPE_CHECKING, Any

import numpy as np

from analysis.readers import NSYS_VERSION, NULL, nsys_nvtx, sqlite_files
from analysis.readers.global_ids import ID_BITS, ID_MASK, PROCESS_MASK
from analysis.readers.nsys_columns import (
    DIAGNOSTIC,
    DURATION,
    EXPRS,
    FAST_DURATION,
    KERNEL,
    MEMCPY,
    MEMSET,
    OSRT,
    TABLE,
)
from analysis.readers.nsys_nvtx import NVTX, PUSHPOP_TYPES, STARTEND_TYPES
from analysis.readers.nsys_sql import SqlExport, _ident

if TYPE_CHECKING:  # imported where a frame is made: `harness kernels` reads blocks and strings without it
    import pandas as pd

VERSION = NSYS_VERSION  # bump it there when what a frame holds changes: cached frames are rebuilt
META_TABLES = ("EXPORT_META_DATA", "META_DATA_EXPORT")
# nsys's messages that say events were lost (capture health fails on them; every table notes them)
LOST = re.compile(r"\b(?:lost|dropp?ed|discard(?:ed)?|overflow(?:ed)?)\b", re.IGNORECASE)
DOMAIN_CREATE = 75  # NVTX_EVENTS.eventType of a domain's creation
OSRT_CLASS = 27  # OSRT_API.eventClass of OS runtime calls (what osrtsum counts)

# DIAGNOSTIC_EVENT.severity and .source where the export has no ENUM_DIAGNOSTIC_* tables
SEVERITY = {0: "Unknown", 1: "Info", 2: "Warning", 3: "Error", 4: "Verbose"}
SOURCE = {0: "Unknown source", 1: "Injection", 2: "Daemon", 3: "Analysis"}
HINTS = {
    "kernels": "profile on a GPU with --trace=cuda",
    "runtime": "profile on a GPU with --trace=cuda",
    "memcpy": "profile on a GPU with --trace=cuda",
    "memset": "profile on a GPU with --trace=cuda",
    "nvtx": "profile with --trace=nvtx and a program that emits NVTX ranges",
    "osrt": "profile with --trace=osrt",
    "overhead": "nsys records its own overhead in every capture; export again with a newer nsys",
    "diagnostics": "exports from nsys 2022.4 and older hold no diagnostic messages",
    "contexts": "profile on a GPU with --trace=cuda",
    "cpu_ops": "framework operators are in a torch.profiler (Kineto) trace, not in an nsys export; PyTorch's "
    "NVTX ranges (emit_nvtx) are `harness nvtx`'s rows, grouped by operator",
}


class NsysReader(SqlExport):
    """One open export: its path, SQLAlchemy engine, producer metadata and the tables it holds."""

    format = "nsys-sqlite"
    version = VERSION

    def __init__(self, path: Path, engine: Any, tables: set[str], copy_folder: Path | None = None) -> None:
        self.path = path
        self.engine = engine
        self.copy_folder = copy_folder  # a private copy of a WAL export and its log: removed on close
        self.tables = tables
        self._columns: dict[str, dict[str, str]] = {}
        self.reads: dict[str, int] = {}  # source table -> scans, for tests that count reads
        self.export_meta = self._read_meta()
        # kept for the NVTX ranges read a chunk at a time (analysis.readers.nsys_nvtx)
        self._last_nvtx: int | None = None
        self._domains: dict[tuple[int, int], str] | None = None
        self._strings: dict[int, str] = {}  # StringIds looked up so far
        self._all_strings = False  # all of StringIds is in _strings

    def __repr__(self) -> str:
        return f"NsysReader({str(self.path)!r})"

    def close(self) -> None:
        self.engine.dispose()
        if self.copy_folder is not None:
            sqlite_files.remove_copy(self.copy_folder)
            self.copy_folder = None

    # --- what the trace model asks ------------------------------------------------------------------

    def meta(self) -> dict[str, Any]:
        """Producer, schema, and whether each frame has rows (one row looked at per table: counting every
        table of a big export costs more than the table a command reads)."""
        frames = (*TABLE, "nvtx", "threads", "strings", "diagnostics", "contexts")
        nonempty = {frame: self._any(frame) for frame in frames}
        return {
            "format": self.format,
            "producer": "Nsight Systems",
            "producer_version": self.export_meta.get("EXPORT_PRODUCT_VERSION"),
            "schema": self.export_meta.get("EXPORT_SCHEMA_VERSION"),
            "time_unit": "ns",
            "nonempty": nonempty,
            # tables present, rows or none (nsys's rules and capture health ask)
            "exists": {f: t in self.tables for f, t in {**TABLE, "diagnostics": DIAGNOSTIC}.items()},
            "hints": HINTS,
            "schema_facts": self.schema_facts(),
            "session_start_ns": self._session_start(),
            "capture_end_ns": self.capture_end(),
            "programs": self._programs(),
            "devices": self._gpu_names(),
            "notes": self._lost_events(),
        }

    def _lost_events(self) -> list[str]:
        """A line for every table's notes where nsys said it lost events (DIAGNOSTIC_EVENT: records dropped,
        buffers full): each sum of such a capture misses them. Read once, with the meta (a few rows)."""
        if DIAGNOSTIC not in self.tables or "text" not in self.columns(DIAGNOSTIC):
            return []
        rows = self._rows(f"SELECT text FROM {DIAGNOSTIC} ORDER BY rowid")
        lost = [" ".join(str(t).split()) for (t,) in rows if t is not None and LOST.search(str(t))]
        if not lost:
            return []
        more = f" and {len(lost) - 1:,} more" if len(lost) > 1 else ""
        return [f"nsys lost events in this capture ({shorten(lost[0], 120, placeholder='…')!r}{more}): every "
                "table of it misses them (`harness health` fails it)"]  # fmt: skip

    def schema_facts(self) -> dict[str, bool]:
        """Tables and columns whose presence decides whether nsys 2023.4 runs a rule."""
        return {
            "ENUM_CUDA_MEM_KIND": "ENUM_CUDA_MEM_KIND" in self.tables,
            "StringIds": "StringIds" in self.tables,
            **{f"{t}.greenContextId": "greenContextId" in self.columns(t) for t in (MEMCPY, MEMSET)},
        }

    def _session_start(self) -> int | None:
        """The wall clock (ns since the Unix epoch) at the session's time 0: what lines up several reports."""
        table = "TARGET_INFO_SESSION_START_TIME"
        if table not in self.tables or "utcEpochNs" not in self.columns(table):
            return None
        rows = self._rows(f"SELECT utcEpochNs FROM {table} LIMIT 1")
        return int(rows[0][0]) if rows and isinstance(rows[0][0], int) else None

    def capture_end(self) -> int | None:
        """The capture's end on the events' clock, which starts at the session's start: ANALYSIS_DETAILS's
        duration (None where the export has none: nsys 2020.3 wrote no such table). Its startTime and stopTime
        are on another clock: weatherbench2's (nsys 2025.5) starts at 178,285 s while its events run from
        0.13 s to 0.56 s; a100-saxpy-mpi's (2022.2) at 1.17 s, after its first kernel (0.92 s). No event of
        the shared exports (2022.1 to 2026.2) ends past its duration."""
        if "duration" not in self.columns("ANALYSIS_DETAILS"):
            return None
        end = self._rows("SELECT max(duration) FROM ANALYSIS_DETAILS")[0][0]
        return end if type(end) is int else None

    def _programs(self) -> list[str]:
        """Names of the processes nsys launched (those with captured output streams)."""
        if not {"ProcessStreams", "PROCESSES"} <= self.tables:
            return []
        if not {"globalPid", "name"} <= self.columns("PROCESSES") or "globalPid" not in self.columns(
            "ProcessStreams"
        ):
            return []
        sql = (
            "SELECT DISTINCT p.name FROM PROCESSES p WHERE p.globalPid IN "
            "(SELECT globalPid FROM ProcessStreams) ORDER BY p.name"
        )
        return [str(r[0]) for r in self._rows(sql) if r[0] is not None]

    def _gpu_names(self) -> list[str]:
        """The names of the machine's GPUs as nsys recorded them (TARGET_INFO_GPU, nsys 2020.3's
        TARGET_INFO_CUDA_GPU), in nsys's order; none where neither table names them."""
        for table in ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU"):
            if table in self.tables and "name" in self.columns(table):
                rows = self._rows(f"SELECT name FROM {table} ORDER BY rowid")
                return [str(r[0]) for r in rows if r[0] is not None and str(r[0]).strip()]
        return []

    def count(self, frame: str) -> int:
        """Rows of `frame` (a count(*) of its table)."""
        table, where = self._source(frame)
        return self._count(table, where)

    def _source(self, frame: str) -> tuple[str, str]:
        if frame == "nvtx":
            where = f"eventType IN ({', '.join(map(str, (*PUSHPOP_TYPES, *STARTEND_TYPES)))})"
            return NVTX, where if "eventType" in self.columns(NVTX) else ""
        if frame == "osrt" and "eventClass" in self.columns(OSRT):
            return OSRT, f"eventClass = {OSRT_CLASS}"
        if frame == "contexts":
            return next((t for t in (KERNEL, MEMCPY, MEMSET) if self._any_in(t)), KERNEL), ""
        named = {"threads": "ThreadNames", "strings": "StringIds", "diagnostics": DIAGNOSTIC}
        return named.get(frame, TABLE.get(frame, "")), ""

    def _any_in(self, table: str) -> bool:
        return table in self.tables and bool(
            self._rows(f"SELECT EXISTS (SELECT 1 FROM {_ident(table)})")[0][0]
        )

    def _any(self, frame: str) -> bool:
        table, where = self._source(frame)
        if table not in self.tables:
            return False
        cond = f" WHERE {where}" if where else ""
        return bool(self._rows(f"SELECT EXISTS (SELECT 1 FROM {_ident(table)}{cond})")[0][0])

    def read(self, frame: str, columns: Sequence[str]) -> pd.DataFrame:
        """`columns` of `frame` (range_id too for nvtx; threads and strings are read whole)."""
        import pandas as pd

        if frame == "nvtx":
            return self.nvtx_ranges(columns)
        if frame == "threads":
            return self.thread_names()
        if frame == "strings":
            return self.strings()
        if frame == "diagnostics":
            return self.diagnostics()
        if frame == "contexts":
            return self.contexts()
        table, exprs, where, params = self._scan_of(frame, columns)
        df = pd.DataFrame(self.scan(table, exprs, where, params), copy=False)
        # memory kinds: nsys counts from 0 (pageable) with 7 unknown, the trace model as CUPTI, 0 unknown
        for col in ("src_kind", "dst_kind", "mem_kind"):
            if col in df:
                kind = df[col].to_numpy()
                df[col] = np.where((kind >= 0) & (kind <= 6), kind + 1, np.where(kind == NULL, NULL, 0))
        return df

    def _scan_of(self, frame: str, columns: Sequence[str]) -> tuple[str, dict[str, str], str, dict[str, Any]]:
        """What `scan` reads for `frame`'s `columns`: the table, each column's expression over the columns
        the export has, and the WHERE clause with its parameters (osrt: the OS runtime calls only)."""
        table = TABLE[frame]
        present = self.columns(table)
        exprs = {c: _expr(EXPRS[frame][c], present) for c in columns}
        texts = any(self.text_affinity(table, t) for t in ("start", "end"))
        if exprs.get("duration") == DURATION and not texts:
            exprs["duration"] = FAST_DURATION
        if frame == "osrt" and "eventClass" in present:
            return table, exprs, "eventClass = :cls", {"cls": OSRT_CLASS}
        return table, exprs, "", {}

    def _read_meta(self) -> dict[str, str]:
        for table in META_TABLES:
            if table in self.tables:
                names = [c for c in ("name", "value") if c in self.columns(table)]
                if len(names) == 2:
                    return {str(k): str(v) for k, v in self._rows(f"SELECT name, value FROM {table}")}
        return {}

    def read_blocks(self, frame: str, columns: Sequence[str]) -> Iterator[dict[str, np.ndarray]] | None:
        """`read` a chunk at a time, for the frames read by scanning one table (kernels, runtime, memcpy,
        memset, osrt, overhead, nvtx: `nsys_nvtx.range_blocks`); None for the others."""
        if frame == "nvtx":
            return nsys_nvtx.range_blocks(self, columns)
        if frame not in TABLE or frame not in EXPRS:
            return None
        table, exprs, where, params = self._scan_of(frame, columns)
        kinds = [c for c in ("src_kind", "dst_kind", "mem_kind") if c in exprs]

        source = self.scan_blocks(table, exprs, where, params)  # its first chunks are read meanwhile

        def blocks() -> Iterator[dict[str, np.ndarray]]:
            for block in source:
                for col in kinds:  # as `read` maps them
                    kind = block[col]
                    block[col] = np.where(
                        (kind >= 0) & (kind <= 6), kind + 1, np.where(kind == NULL, NULL, 0)
                    )
                yield block

        return blocks()

    def strings(self) -> pd.DataFrame:
        """StringIds: id, value."""
        import pandas as pd

        ids, values = self.string_columns()
        return pd.DataFrame({"id": ids, "value": pd.Series(values, dtype=object)})

    def string_columns(self) -> tuple[np.ndarray, list[str]]:
        """`strings` as its columns (ids as int64, values), without pandas: the string table of a table
        made from blocks (`harness kernels`)."""
        if "StringIds" not in self.tables:
            return np.empty(0, dtype=np.int64), []
        self.reads["StringIds"] = self.reads.get("StringIds", 0) + 1
        rows = self._rows("SELECT id, value FROM StringIds WHERE typeof(id) = 'integer'")
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        return ids, [str(r[1]) if r[1] is not None else "" for r in rows]

    def nvtx_ranges(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """NVTX push/pop and start/end ranges, one row each, names resolved and domains attached
        (analysis.readers.nsys_nvtx).

        Columns: range_id (rowid), start, end (the export's last timestamp for a range never closed),
        global_tid, pushpop (bool), payload (Int64, NA when none), name (category), domain (category, NA
        outside named domains); range_id and `columns` of them (default all), read in one scan.
        """
        return nsys_nvtx.ranges(self, columns)

    def last_nvtx_time(self) -> int:
        """The export's last NVTX start or end: the end of a range never closed."""
        if self._last_nvtx is None:
            # integers only: SQLite orders text after every number (a damaged export's 'soon')
            last = self._rows(
                "SELECT max(ifnull(max(CASE WHEN typeof(start) = 'integer' THEN start END), 0), "
                f"ifnull(max(CASE WHEN typeof(end) = 'integer' THEN end END), 0)) FROM {NVTX}"
            )[0][0]
            self._last_nvtx = last if type(last) is int else 0
        return self._last_nvtx

    def nvtx_domains(self) -> dict[tuple[int, int], str]:
        """(domainId, process part of globalTid) -> domain name, from the domain-create events (read once)."""
        if self._domains is None:
            self._domains = self._read_domains()
        return self._domains

    def _read_domains(self) -> dict[tuple[int, int], str]:
        if NVTX not in self.tables or not {"domainId", "eventType", "text"} <= self.columns(NVTX):
            return {}
        rows = self._rows(
            f"SELECT domainId, globalTid, text FROM {NVTX} WHERE eventType = :t AND text IS NOT NULL "
            "ORDER BY start",
            {"t": DOMAIN_CREATE},
        )
        out: dict[tuple[int, int], str] = {}
        for dom, gtid, name in rows:
            with contextlib.suppress(TypeError, ValueError):
                out.setdefault((int(dom), int(gtid or 0) & PROCESS_MASK), str(name))
        return out

    def thread_names(self) -> pd.DataFrame:
        """ThreadNames: global_tid, name."""
        import pandas as pd

        rows: list[tuple[Any, ...]] = []
        if {"ThreadNames", "StringIds"} <= self.tables:
            self.reads["ThreadNames"] = self.reads.get("ThreadNames", 0) + 1
            rows = self._rows(
                "SELECT t.globalTid, s.value FROM ThreadNames AS t JOIN StringIds AS s ON s.id = t.nameId "
                "WHERE typeof(t.globalTid) = 'integer'"
            )
        return pd.DataFrame(
            {
                "global_tid": np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
                "name": pd.Series([str(r[1]) for r in rows], dtype=object),
            }
        )

    def backtraces(self, frame: str, calls: Sequence[tuple[int, int]]) -> dict[tuple[int, int], list[str]]:
        """The recorded backtraces of `calls` ((global_tid, start) of CUDA calls, frame "runtime", or OS
        runtime calls, "osrt"): per call that has one, its frames innermost first, each `symbol (module)`.
        nsys records them with --backtrace (OS runtime calls past a threshold) and --python-backtrace=cuda
        (the Python frames of CUDA calls); none where the export holds no call chains."""
        chains = {"runtime": (TABLE["runtime"], "CUDA_CALLCHAINS"), "osrt": (OSRT, "OSRT_CALLCHAINS")}
        return self.call_chains(*chains[frame], calls)

    def capture_facts(self, pid: int | None = None) -> dict[str, int | bool]:
        """What capture health asks of the source and the frames do not keep: whether NVTX was traced
        (NVTX_EVENTS exists), its events of any kind, its ranges, and ranges never closed: no end (the
        nvtx frame gives them the export's last timestamp), or the end nsys gives a range still open when
        the capture stops, the capture's own end (ANALYSIS_DETAILS.duration: a range left open by a
        program that exited showed it under nsys 2023.4, and two of DLProf's under 2022.1). `pid`: of that
        process's threads only."""
        if NVTX not in self.tables:
            return {"nvtx_table": False, "nvtx_events": 0, "nvtx_ranges": 0, "open_ranges": 0}
        cols = self.columns(NVTX)
        ranges = f"eventType IN ({', '.join(map(str, (*PUSHPOP_TYPES, *STARTEND_TYPES)))})"
        if "eventType" not in cols:
            ranges = "1"
        never = "end IS NULL"
        if (end := self.capture_end()) is not None:
            never += f" OR end >= {end}"
        sums = f"ifnull(sum({ranges}), 0), ifnull(sum(({ranges}) AND ({never})), 0)"
        where = ""
        if pid is not None and "globalTid" in cols:
            where = f" WHERE ((globalTid >> {ID_BITS}) & {ID_MASK}) = {int(pid)}"
        events, in_ranges, open_ = self._rows(f"SELECT count(*), {sums} FROM {NVTX}{where}")[0]
        return {"nvtx_table": True, "nvtx_events": int(events), "nvtx_ranges": int(in_ranges),
                "open_ranges": int(open_)}  # fmt: skip

    def diagnostics(self) -> pd.DataFrame:
        """DIAGNOSTIC_EVENT (nsys 2023 and newer): timestamp, global_pid, severity and source (their labels),
        text; in time order."""
        import pandas as pd

        rows: list[tuple[Any, ...]] = []
        cols = self.columns(DIAGNOSTIC)
        if {"timestamp", "severity", "text"} <= cols:
            self.reads[DIAGNOSTIC] = self.reads.get(DIAGNOSTIC, 0) + 1
            pid = "globalPid" if "globalPid" in cols else "NULL"
            source = "source" if "source" in cols else "0"
            columns = f"timestamp, {pid}, severity, {source}, text"
            rows = self._rows(f"SELECT {columns} FROM {DIAGNOSTIC} ORDER BY timestamp, rowid")
        severity = {**SEVERITY, **self._enum("ENUM_DIAGNOSTIC_SEVERITY_LEVEL")}
        source_of = {**SOURCE, **self._enum("ENUM_DIAGNOSTIC_SOURCE_TYPE")}

        def ints(i: int) -> np.ndarray:
            return np.fromiter((r[i] if isinstance(r[i], int) else NULL for r in rows), np.int64, len(rows))

        return pd.DataFrame(
            {
                "timestamp": ints(0),
                "global_pid": ints(1),
                "severity": pd.Series([severity.get(r[2], str(r[2])) for r in rows], dtype=object),
                "source": pd.Series([source_of.get(r[3], str(r[3])) for r in rows], dtype=object),
                "text": pd.Series(["" if r[4] is None else str(r[4]) for r in rows], dtype=object),
            }
        )

    def contexts(self) -> pd.DataFrame:
        """The CUDA contexts of the GPU work: global_pid, device_id, context_id, once each."""
        import pandas as pd

        parts = [
            f"SELECT globalPid, deviceId, contextId FROM {t}"
            for t in (KERNEL, MEMCPY, MEMSET)
            if {"globalPid", "deviceId", "contextId"} <= self.columns(t)
        ]
        rows = self._rows(" UNION ".join(parts) + " ORDER BY 1, 2, 3") if parts else []
        rows = [r for r in rows if all(isinstance(v, int) for v in r)]
        return pd.DataFrame(
            {c: np.array([r[i] for r in rows], dtype=np.int64) for i, c in
             enumerate(("global_pid", "device_id", "context_id"))}
        )  # fmt: skip

    def _enum(self, table: str) -> dict[int, str]:
        if table not in self.tables or not {"id", "label"} <= self.columns(table):
            return {}
        return {int(i): str(v) for i, v in self._rows(f"SELECT id, label FROM {table}") if isinstance(i, int)}


def _expr(expr: str, present: set[str]) -> str:
    """`expr` where the columns it names exist; NULL where a plain column is absent from this schema."""
    if expr.startswith("coalesce(mangledName"):
        return expr if "mangledName" in present else "demangledName"
    if expr.isidentifier() and expr not in present:
        return "NULL"
    return expr
