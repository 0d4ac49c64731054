"""The trace model: one profile (an nsys export or a Kineto trace) as a few typed pandas frames.

Every table in analysis/ is a function of a `Trace`, never of a file. A reader per format fills the
frames; the trace loads each frame lazily, only the columns asked for, each column at most once, and keeps
what it read in a Parquet cache (analysis.trace.cache) so that later commands never open the source again.

Frames and their columns (times in ns on the source's clock, ids as int64, NULL as the `NULL` sentinel):

- kernels: start, end, duration, correlation_id, global_pid, device_id, stream_id, grid, block (launch
  dimensions packed, see analysis.tables.kernels), name_id, short_name_id, mangled_name_id, context_id
- runtime (CUDA runtime and driver calls): start, end, duration, correlation_id, global_tid, name_id
- memcpy: start, end, duration, copy_kind, bytes, stream_id, correlation_id, global_pid, device_id, src_kind,
  dst_kind (CUPTI's copy and memory kinds: copy_kind 1 is HtoD, memory kind 1 pageable, 3 device),
  context_id, src_device, dst_device (the devices a copy reads and writes; NULL where not recorded),
  green_context_id (NULL before schema 3.x)
- memset: start, end, duration, bytes, stream_id, correlation_id, global_pid, device_id, mem_kind, context_id,
  green_context_id
- osrt (OS runtime calls): start, end, duration, global_tid, name_id

`duration` is end - start, NULL where the row cannot be right: a table that needs only durations reads one
column, not two.
- nvtx (ranges): range_id, start, end, global_tid, pushpop (bool), payload (Int64), name, domain
- syncs (CUDA synchronization as the GPU records it: stream waits, stream/context/event syncs): start, end,
  stream_id, correlation_id, global_pid, device_id, name_id
- cpu_ops (framework operators, e.g. PyTorch's aten:: ops): start, end, global_tid, name_id, external_id,
  shapes_id (the operator's input sizes with record_shapes, "" without)
- threads: global_tid, name
- strings: id, value (what the *name_id columns point at)
- overhead (nsys's own time, PROFILER_OVERHEAD): start, end, duration, global_tid, name_id
- diagnostics (nsys's messages, DIAGNOSTIC_EVENT): timestamp, global_pid, severity, source, text
- contexts (the CUDA contexts GPU work ran in): global_pid, device_id, context_id

A reader fills the frames its format has; the others are empty (nsys exports: no syncs, no cpu_ops;
Kineto traces: no overhead, diagnostics or contexts).

global_tid / global_pid follow nsys: the process id in bits 24-47, the thread id in bits 0-23.
Rows that cannot be right (no start or end, end before start, a name id with no string) are left out
when a frame is handed out, and `notes` says how many.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from analysis import readers
from analysis.errors import ExportError
from analysis.readers import NULL
from analysis.stats import member

if TYPE_CHECKING:  # pandas is imported where a frame is made: tables over `blocks` need none
    import pandas as pd

FRAMES: dict[str, tuple[str, ...]] = {
    "kernels": ("start", "end", "duration", "correlation_id", "global_pid", "device_id", "stream_id", "grid",
                "block",
                "name_id", "short_name_id", "mangled_name_id", "context_id"),
    "runtime": ("start", "end", "duration", "correlation_id", "global_tid", "name_id"),
    "memcpy": ("start", "end", "duration", "copy_kind", "bytes", "stream_id", "correlation_id", "global_pid",
               "device_id", "src_kind", "dst_kind", "context_id", "src_device", "dst_device",
               "green_context_id"),
    "memset": ("start", "end", "duration", "bytes", "stream_id", "correlation_id", "global_pid", "device_id",
               "mem_kind", "context_id", "green_context_id"),
    "osrt": ("start", "end", "duration", "global_tid", "name_id"),
    "nvtx": ("range_id", "start", "end", "global_tid", "pushpop", "payload", "name", "domain"),
    "syncs": ("start", "end", "stream_id", "correlation_id", "global_pid", "device_id", "name_id"),
    "cpu_ops": ("start", "end", "global_tid", "name_id", "external_id", "shapes_id"),
    "threads": ("global_tid", "name"),
    "strings": ("id", "value"),
    "overhead": ("start", "end", "duration", "global_tid", "name_id"),
    "diagnostics": ("timestamp", "global_pid", "severity", "source", "text"),
    "contexts": ("global_pid", "device_id", "context_id"),
}  # fmt: skip
WHOLE = frozenset({"threads", "strings", "diagnostics", "contexts"})  # read in one piece
TYPED = frozenset({"nvtx", "threads", "strings", "diagnostics", "contexts"})  # the reader types them
TIMED = frozenset({"kernels", "runtime", "memcpy", "memset", "osrt", "nvtx", "syncs", "cpu_ops", "overhead"})
NAMES_OF = {"kernels": "kernels", "runtime": "CUDA API calls", "memcpy": "memory copies",
            "memset": "memory sets", "osrt": "OS runtime calls", "nvtx": "NVTX ranges",
            "syncs": "CUDA synchronization events", "cpu_ops": "CPU operators",
            "overhead": "profiler overhead events"}  # fmt: skip
# (format, frame) staged a column at a time: an nsys export's NVTX ranges are read whole, by a scan of
# their table that costs little per column
BY_COLUMN = frozenset({("nsys-sqlite", "nvtx")})
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
MAX_TIME = 2**62  # ns; a start or end past ±this is left out
BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark, which some editors put before JSON
BLOCK_ROWS = 1 << 18  # rows per block of `Trace.blocks`
# the kernels' name column of each name style (mangled falls back to demangled where none was recorded)
NAME_COLUMN = {"demangled": "name_id", "base": "short_name_id", "mangled": "mangled_name_id"}

_unwritable_said: set[str] = set()


class Trace:
    """One profile, its metadata and its frames, read on demand."""

    def __init__(self, path: Path, opener: Any, version: str, *, cache: bool = True) -> None:
        self.path = path
        self._opener = opener
        self._reader: Any = None
        self.notes: list[str] = []
        self._data: dict[str, dict[str, Any]] = {f: {} for f in FRAMES}
        self._entry = None
        self._entry_ready = False
        meta = None
        if cache:
            from analysis.trace.cache import Cache

            store = Cache()
            store.check()  # a folder of the user's: refused before anything is read
            if store.limit > 0:  # a limit of 0 caches nothing (`harness cache --max-size 0`)
                with contextlib.suppress(OSError):
                    self._entry = store.entry(path, version)
                    meta = self._entry.meta()
                    self._entry_ready = meta is not None
        if meta is None:
            meta = self.reader.meta()
        self.meta: dict[str, Any] = meta
        self.format: str = str(meta.get("format", "?"))
        for text in meta.get("notes", ()):  # what the reader left out or changed (Kineto events, names)
            self.note(str(text))

    def __repr__(self) -> str:
        return f"Trace({str(self.path)!r}, format={self.format})"

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def reader(self) -> Any:
        if self._reader is None:
            self._reader = self._opener(self.path)
        return self._reader

    @property
    def source_reads(self) -> dict[str, int]:
        """How many times each source table was scanned (nothing when everything came from the cache)."""
        return dict(self._reader.reads) if self._reader is not None else {}

    @property
    def cache_entry(self) -> Any:
        """The cache entry (analysis.trace.cache.Entry) holding this trace's frames; None without one."""
        return self._entry if self._entry_ready else None

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    # --- what is there -------------------------------------------------------------------------------

    def count(self, frame: str) -> int:
        """Rows of `frame` in the source (before rows that cannot be right are left out)."""
        if not self.has(frame):
            return 0
        have = self._data[frame]
        if not have and self._entry_ready and self._entry is not None:
            cached = [c for c in FRAMES[frame] if self._entry.has(frame, c)]
            if cached:
                self._columns(frame, cached[:1])
        if have:
            return len(next(iter(have.values())))
        return int(self.reader.count(frame))

    def has(self, frame: str) -> bool:
        """Whether `frame` has rows, from the metadata alone."""
        return bool(self.meta.get("nonempty", {}).get(frame, False))

    def require(self, frame: str, what: str) -> None:
        """Raise ExportError ("no WHAT in PATH: hint") unless `frame` has rows."""
        if not self.has(frame):
            hint = self.meta.get("hints", {}).get(frame, "record it with the matching trace option")
            raise ExportError(f"no {what} in {self.path}: {hint}")

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # --- frames --------------------------------------------------------------------------------------

    def load(self, wanted: Mapping[str, Iterable[str]]) -> None:
        """Read the columns of several frames now (`summary` asks for all it needs at once, so each source
        table is scanned once)."""
        for frame, columns in wanted.items():
            if self.has(frame) or frame in ("threads", "strings"):
                self._columns(frame, list(columns))

    def stage(self, wanted: Mapping[str, Iterable[str]]) -> bool:
        """Put the columns of several frames in the cache now, each source table scanned once, holding none
        of them: a frame read in chunks (kernels, runtime, memcpy, memset, osrt) goes to the cache a chunk
        at a time, another (nvtx) is read whole and let go. False, having done nothing, without a writable
        cache (then `load` is the way to scan each table once). `summary` stages what its tables read, then
        builds them one at a time from the cache, letting each one's frames go (`release`)."""
        if self._entry is None:
            return False
        for frame, columns in wanted.items():
            if not (self.has(frame) or frame in ("threads", "strings")) or self.holds(frame, list(columns)):
                continue
            cols = list(dict.fromkeys(columns))
            if self._entry_ready and all(self._entry.has(frame, c) for c in cols):
                continue
            if frame in ("threads", "strings"):
                self._columns(frame, cols)
                continue
            read_blocks = getattr(self.reader, "read_blocks", None)
            source = read_blocks(frame, cols) if read_blocks is not None else None
            if source is None and (self.format, frame) in BY_COLUMN:
                self._stage_by_column(frame, cols)
            elif source is None:
                self._columns(frame, cols, keep=False)
            else:
                writer = self._writer(frame, cols)
                if writer is None:
                    return False
                try:
                    for block in source:
                        writer.write(block)
                    writer.close()
                except BaseException:
                    writer.abort()
                    raise
            if self._entry is None:  # the cache folder turned out not writable
                return False
        return True

    def _stage_by_column(self, frame: str, columns: list[str]) -> None:
        """Stage `columns` of a frame read whole a column at a time (each read is a scan of the source
        table): one column is held at once, not all (7.1M NVTX ranges: ~60 MB a column)."""
        for col in columns:
            if self._entry is None:
                return
            if not (self._entry_ready and self._entry.has(frame, col)):
                self._columns(frame, [col], keep=False)

    def release(self) -> None:
        """Let go of the frames held in memory (the string and thread tables stay); read again, they come
        from the cache."""
        for frame, held in self._data.items():
            if frame not in ("threads", "strings"):
                held.clear()
        readers.trim_heap()

    def frame(self, frame: str, columns: Sequence[str] | None = None, *, keep: bool = True) -> pd.DataFrame:
        """`columns` (default all) of the rows of `frame` that can be right. keep=False: columns not in
        memory yet are read for this call only (a big frame that one step needs is not held to the end)."""
        cols, check = self._checked(frame, columns)
        data = self._columns(frame, list(dict.fromkeys([*cols, *check])), keep=keep)
        rows = self._rows_ok(frame, cols, check, lambda _: data)
        import pandas as pd

        out = pd.DataFrame({c: data[c] for c in cols}, copy=False)
        return out if rows.all() else out[rows].reset_index(drop=True)

    def blocks(
        self, frame: str, columns: Sequence[str], rows: int = BLOCK_ROWS, *, notes: list[str] | None = None
    ) -> Iterator[dict[str, np.ndarray]]:
        """The rows of `frame` that `frame(frame, columns)` keeps, in the same order and with the same notes
        (added when the last block is out), as int64 arrays of at most `rows` rows, never the whole frame
        at once: from memory, else from the cache, else from the source (and then into the cache as they
        come). For tables that aggregate (`analysis.tables.kernels`): memory stays what the aggregate holds,
        whatever the export's size, and nothing here imports pandas when the cache has the columns.
        `notes`: a list the notes go to instead (a pass reading several frames at once orders them itself).
        Columns that are not integers (nvtx's pushpop, name, domain) come as numpy booleans and pandas
        Categoricals."""
        note = self.note if notes is None else functools.partial(_add_note, notes)
        cols, check = self._checked(frame, columns)
        wanted = list(dict.fromkeys([*cols, *check]))
        named = [c for c in cols if c.endswith("name_id")]
        strings = None
        if named:
            strings = np.sort(np.fromiter(self._string_table.keys(), dtype=np.int64))
            if not len(strings):
                raise ExportError(
                    f"{self.path} has no string table (StringIds), so its {NAMES_OF[frame]} have no names: "
                    "export it again from the report"
                )
        n = bad = wild = 0
        missing = dict.fromkeys(named, 0)
        for raw in self._raw_blocks(frame, wanted, rows):
            size = len(raw[wanted[0]])
            n += size
            keep = np.ones(size, dtype=bool)
            if check:
                wrong, far = _wrong_and_wild(check, raw)
                bad += int(wrong.sum())
                wild += int(far.sum())
                keep &= ~(wrong | far)
                del wrong, far
            for col in named:
                ids = raw[col]
                known = member(ids, strings)  # type: ignore[arg-type]
                if col != "name_id":
                    known |= ids == NULL
                missing[col] += int((~known & keep).sum())
                keep &= known
            yield {c: raw[c] if keep.all() else raw[c][keep] for c in cols}
        for text in _left_out(frame, check, n, wild, bad):
            note(text)
        for count in missing.values():
            if count:
                note(f"left out {count:,} {NAMES_OF[frame]} whose name is not in the export's string table")

    def _raw_blocks(self, frame: str, columns: list[str], rows: int) -> Iterator[dict[str, np.ndarray]]:
        held = self._data[frame]
        if all(c in held for c in columns) or not self.has(frame):
            data = self._columns(frame, columns)
            total = len(data[columns[0]])
            for lo in range(0, total, rows):
                yield {c: np.asarray(data[c][lo : lo + rows]) for c in columns}
            return
        entry = self._entry
        if self._entry_ready and entry is not None and all(entry.has(frame, c) for c in columns):
            batches = entry.batches(frame, columns, rows)
            if batches is not None:
                try:
                    yield from batches
                except Exception as e:  # a damaged file the footer did not show: blocks were handed out
                    for c in columns:
                        with contextlib.suppress(OSError):
                            entry.path(frame, c).unlink()
                    from analysis.errors import AnalysisError

                    raise AnalysisError(
                        f"the cached {NAMES_OF.get(frame, frame)} of {self.path} could not be read ({e}); "
                        "they were deleted: run the command again"
                    ) from None
                return
        read_blocks = getattr(self.reader, "read_blocks", None)
        source = read_blocks(frame, columns) if read_blocks is not None else None
        if source is None:  # a format or frame read whole: read it, keep none of it
            data = self._columns(frame, columns, keep=False)
            total = len(data[columns[0]])
            for lo in range(0, total, rows):
                yield {c: np.asarray(data[c][lo : lo + rows]) for c in columns}
            return
        writer = self._writer(frame, [c for c in columns if entry is None or not entry.has(frame, c)])
        try:
            for block in source:
                if writer is not None:
                    writer.write(block)
                total = len(block[columns[0]])
                for lo in range(0, total, rows):
                    yield {c: block[c][lo : lo + rows] for c in columns}
            if writer is not None:
                writer.close()
                writer = None
        finally:
            if writer is not None:
                writer.abort()

    def _writer(self, frame: str, columns: list[str]) -> Any:
        """A block writer of `columns` into the cache entry (analysis.trace.cache.ColumnWriter); None
        without."""
        entry = self._entry
        if entry is None or not columns:
            return None
        try:
            if not self._entry_ready:
                entry.create(self.meta)
                self._entry_ready = True
            return entry.writer(frame, columns)
        except OSError as e:
            self._unwritable(e)
            return None

    def holds(self, frame: str, columns: Sequence[str]) -> bool:
        """Whether `columns` of `frame` are in memory already."""
        return all(c in self._data[frame] for c in columns)

    def rows_ok(self, frame: str, columns: Sequence[str]) -> np.ndarray:
        """The rows `frame(frame, columns)` keeps, as a mask over the raw rows (the same notes), reading
        a column or two at a time and keeping none of them."""
        cols, check = self._checked(frame, columns)
        return self._rows_ok(frame, cols, check, lambda c: self._columns(frame, c, keep=False))

    def column(self, frame: str, column: str, rows: np.ndarray | None = None, *, keep: bool = True) -> Any:
        """One raw column (unfiltered: index it with `rows_ok`), or its values at the positions `rows`."""
        values = np.asarray(self._columns(frame, [column], keep=keep)[column])
        return values if rows is None else values[rows]

    def _checked(self, frame: str, columns: Sequence[str] | None) -> tuple[list[str], list[str]]:
        """(the columns, the columns that say whether a row can be right)"""
        cols = list(FRAMES[frame] if columns is None else columns)
        unknown = [c for c in cols if c not in FRAMES[frame]]
        if unknown:
            raise KeyError(f"{frame} has no column {unknown[0]!r}: {', '.join(FRAMES[frame])}")
        check: list[str] = []
        if frame in TIMED:  # a duration alone carries the check (NULL where the row cannot be right)
            by_duration = (
                "duration" in FRAMES[frame] and "duration" in cols and not {"start", "end"} & set(cols)
            )
            check = ["duration"] if by_duration else ["start", "end"]
        return cols, check

    def _rows_ok(self, frame: str, cols: list[str], check: list[str], get: Any) -> np.ndarray:
        data = get(check or cols[:1])
        n = len(next(iter(data.values()))) if data else 0
        rows = np.ones(n, dtype=bool)
        if check and n:
            wrong, far = _wrong_and_wild(check, data)
            for text in _left_out(frame, check, n, int(far.sum()), int(wrong.sum())):
                self.note(text)
            rows &= ~(wrong | far)
            del wrong, far
        del data
        for col in cols:
            if col.endswith("name_id") and n:
                rows &= self._known_names(frame, col, np.asarray(get([col])[col]), rows)
        return rows

    @functools.cached_property
    def _string_table(self) -> dict[int, str]:
        cached = self._cached_strings()
        if cached is not None:
            return cached
        s = self._columns("strings", ["id", "value"])
        return dict(zip(s["id"].tolist(), s["value"].tolist(), strict=True))

    def _cached_strings(self) -> dict[int, str] | None:
        """The string table without pandas (a table over `blocks` needs none) when it is not in memory yet:
        from the cache, else from a reader that gives it as columns (nsys), then kept in the cache."""
        entry = self._entry
        if self._data["strings"]:
            return None
        cached = (
            entry.strings("strings", ["id", "value"]) if self._entry_ready and entry is not None else None
        )
        if cached is None:
            return self._read_strings()
        if None in cached["value"]:
            return None
        return dict(zip(cached["id"], cached["value"], strict=True))

    def _read_strings(self) -> dict[int, str] | None:
        """The string table of a reader that gives it as columns (nsys), held and put in the cache without
        pandas; None for another reader."""
        read = getattr(self.reader, "string_columns", None)
        if read is None:
            return None
        ids, values = read()
        self._data["strings"].update(id=ids, value=np.array(values, dtype=object))
        if self._entry is not None:
            from analysis.trace.arrow_arrays import int64_array, string_array

            self._save("strings", {"id": int64_array(ids), "value": string_array(values)})
        return dict(zip(ids.tolist(), values, strict=True))

    def strings(self, ids: Iterable[int] | None = None) -> dict[int, str]:
        """id -> string, for `ids` (all when None). The table is built once per trace: tables ask often."""
        table = self._string_table
        if ids is None:
            return dict(table)
        return {int(i): table[int(i)] for i in ids if int(i) in table}

    def thread_names(self) -> dict[int, str]:
        t = self._columns("threads", ["global_tid", "name"])
        return dict(zip(t["global_tid"].tolist(), t["name"].tolist(), strict=True))

    def _known_names(self, frame: str, col: str, ids: np.ndarray, keep: np.ndarray) -> np.ndarray:
        strings = self._columns("strings", ["id", "value"])["id"]
        if not len(strings):
            raise ExportError(
                f"{self.path} has no string table (StringIds), so its {NAMES_OF[frame]} have no names: "
                "export it again from the report"
            )
        known = member(ids, np.asarray(strings))
        if col != "name_id":  # other name styles fall back to the main name where missing
            known |= ids == NULL
        missing = int((~known & keep).sum())
        if missing:
            self.note(
                f"left out {missing:,} {NAMES_OF[frame]} whose name is not in the export's string table"
            )
        return known

    def _columns(self, frame: str, columns: list[str], keep: bool = True) -> dict[str, Any]:
        """The raw (unfiltered) columns, from memory, the cache, or the reader, in that order; with
        keep=False those not in memory yet are not kept there."""
        if not keep and frame not in ("threads", "strings"):
            held = self._data[frame]
            have = {c: held[c] for c in columns if c in held}
            self._data[frame] = have
            try:
                return self._columns(frame, columns)
            finally:
                self._data[frame] = held
        have = self._data[frame]
        missing = [c for c in columns if c not in have]
        if missing and self._entry_ready and self._entry is not None:
            for col, values in self._entry.load(frame, missing).items():
                have[col] = values
            missing = [c for c in columns if c not in have]
        if missing:
            if frame in WHOLE:
                missing = list(FRAMES[frame])
            df = self.reader.read(frame, missing) if self.has(frame) or frame in TYPED else None
            if df is None:
                df = _empty(frame, missing)
            lengths = {len(v) for v in have.values()}
            if lengths and lengths != {len(df)}:  # the cache and the source disagree: trust the source
                have.clear()
                return self._columns(frame, columns)
            for col in df.columns:
                have[col] = df[col].to_numpy() if df[col].dtype == np.int64 else df[col]
            self._save(frame, df)
        return {c: have[c] for c in columns}

    def _save(self, frame: str, df: pd.DataFrame | Mapping[str, Any]) -> None:
        """Write what was read from the source to the cache, now. Not on a thread of its own: a frame on its
        way there was held while the command read the next (1M kernels, `nvtx-gpu` cold: ~25 MB more at
        the peak), and the write costs a few percent of the read (docs/performance.md)."""
        entry = self._entry
        if entry is None:
            return
        try:
            if not self._entry_ready:
                entry.create(self.meta)
                self._entry_ready = True
            entry.store(frame, df)
        except OSError as e:
            self._unwritable(e)

    def _unwritable(self, e: OSError) -> None:
        entry = self._entry
        if entry is not None:
            root = str(entry.cache.root)
            if root not in _unwritable_said:
                _unwritable_said.add(root)
                self.note(f"cache folder {root} is not writable ({e.strerror}): nothing was cached")
        self._entry = None


class TraceView(Trace):
    """A trace seen through a rule (HTA's load rules, one process of a capture): the frames are the
    subclass's, the data and the source stay the base trace's, read once."""

    def __init__(self, base: Trace) -> None:  # no super().__init__: the base trace holds the data
        self.base = base
        self.path = base.path
        self.meta = base.meta
        self.format = base.format

    @property
    def reader(self) -> Any:
        return self.base.reader

    @property
    def source_reads(self) -> dict[str, int]:
        return self.base.source_reads

    @property
    def cache_entry(self) -> Any:
        """None: the entry is the source's, and a view's tables are not the source's."""
        return None

    def _cached_strings(self) -> dict[int, str] | None:
        return None

    def _raw_blocks(self, frame: str, columns: list[str], rows: int) -> Iterator[dict[str, np.ndarray]]:
        """The view's columns (its `_columns`), whole, handed out a block at a time."""
        data = self._columns(frame, columns)
        for lo in range(0, len(data[columns[0]]), rows):
            yield {c: np.asarray(data[c][lo : lo + rows]) for c in columns}

    def close(self) -> None:
        self.base.close()

    def load(self, wanted: Mapping[str, Iterable[str]]) -> None:
        self.base.load(wanted)

    def stage(self, wanted: Mapping[str, Iterable[str]]) -> bool:
        return False  # a view's frames are its own: `load` them

    def release(self) -> None:
        return None


def _add_note(notes: list[str], text: str) -> None:
    if text not in notes:
        notes.append(text)


def _empty(frame: str, columns: Sequence[str]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame({c: np.empty(0, dtype=np.int64) for c in columns})


def _wrong_and_wild(check: list[str], data: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(the rows that cannot be right, the rows with a time past ±2**62 ns) by `check`'s columns: past it
    (146 years) no time is right, and end - start would wrap round int64."""
    if check == ["duration"]:
        duration = np.asarray(data["duration"])
        wrong = duration == NULL
        return wrong, ~wrong & (duration > MAX_TIME)  # its start or end past ±2**61 at least
    start, end = np.asarray(data["start"]), np.asarray(data["end"])
    wrong = (start == NULL) | (end == NULL) | (end < start)
    return wrong, ~wrong & ((start < -MAX_TIME) | (end > MAX_TIME))


def _left_out(frame: str, check: list[str], n: int, wild: int, bad: int) -> list[str]:
    """The notes on the rows `_wrong_and_wild` left out of `n`."""
    notes = []
    if wild:
        what = "a duration past 2**62" if check == ["duration"] else "a start or end past ±2**62"
        notes.append(f"left out {wild:,} of {n:,} {NAMES_OF[frame]} with {what} ns (146 years): not a time")
    if bad:
        notes.append(
            f"left out {bad:,} of {n:,} {NAMES_OF[frame]} that cannot be right "
            "(no start or end, or an end before the start)"
        )
    return notes


def open_trace(path: str | Path, *, cache: bool = True) -> Trace:
    """Open a profile for analysis: an Nsight Systems SQLite export, or a Chrome/Kineto trace (`.json`,
    `.json.gz`, as torch.profiler writes it), told apart by their first bytes. Raises ExportError saying
    what is wrong. With `cache`, frames come from and go to the Parquet cache (analysis.trace.cache)."""
    path = Path(path)
    if not path.exists():
        raise ExportError(f"no such export: {path}")
    if path.is_dir():
        raise ExportError(f"{path} is a folder: pass the .sqlite export or the .json(.gz) trace inside it")
    not_a_file(path)
    if path.suffix in REPORT_SUFFIXES:
        raise ExportError(
            f"{path} is an nsys report, not an export: convert it with `nsys export --type sqlite`"
        )
    if _looks_like_json(path):
        from analysis.readers import kineto

        return Trace(path, kineto.open_kineto, kineto.VERSION, cache=cache)
    from analysis.readers import sqlite_files

    # an export whose write-ahead log holds changes: its content is file and log, and the log changes
    # without the file, so the file's identity does not name it
    why = sqlite_files.not_cached_why(path) if cache else None
    trace = Trace(path, _open_nsys, readers.NSYS_VERSION, cache=cache and why is None)
    if why is not None:
        trace.note(why)
    return trace


def not_a_file(path: Path) -> None:
    """Raise ExportError unless `path` is a regular file (after links): a named pipe, a device or a socket
    would be used up by the first look at it (and a second open of a pipe waits for a writer for ever)."""
    import stat

    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise ExportError(f"cannot read {path}: {e.strerror}") from None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    what = "a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
    raise ExportError(
        f"{path} is {what}, not a file: an export or trace is read more than once (its type, the cache's "
        "key, then its rows), so save it to a file first (e.g. `cat … > trace.json`) and pass that"
    )


def _open_nsys(path: Path) -> Any:
    """The nsys reader, imported when the source is read (it imports pandas): not on a warm command."""
    from analysis.readers import nsys

    return nsys.open_nsys(path)


def _looks_like_json(path: Path) -> bool:
    """Not SQLite, and gzip, or JSON's first byte, or named like a trace (.json, .json.gz)."""
    try:
        with path.open("rb") as f:
            head = f.read(64)
    except OSError as e:
        raise ExportError(f"cannot read {path}: {e.strerror}") from None
    if head.startswith(b"SQLite format 3\x00"):
        return False
    if head.startswith(b"\x1f\x8b") or head.removeprefix(BOM).lstrip()[:1] in (b"{", b"["):
        return True
    if head.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")):  # UTF-16/32 text: the reader says so
        return True
    return path.name.endswith((".json", ".json.gz"))
