"""The trace model: one profile (an nsys export or a Kineto trace) as a few typed pandas frames.

Every table in analysis/ is a function of a `Trace`, never of a file. A reader per format fills the
frames; the trace loads each frame lazily, only the columns asked for, each column at most once, and keeps
what it read in a Parquet cache (analysis.trace.cache) so that later commands never open the source again.

The frames, their columns and the rows left out of them: analysis.trace.frames.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from analysis import readers
from analysis.errors import AnalysisError, ExportError, NoData
from analysis.readers import NULL
from analysis.stats import member
from analysis.trace.arrow_arrays import int64_array, string_array
from analysis.trace.cache import Cache
from analysis.trace.frames import (
    BLOCK_ROWS,
    FRAMES,
    NAMES_OF,
    TIMED,
    TYPED,
    WHOLE,
    _left_out,
    _wrong_and_wild,
    empty_frame,
    rows_of,
)

if TYPE_CHECKING:  # pandas is imported where a frame is made: tables over `blocks` need none
    import pandas as pd


FACTS = "capture_facts"  # the meta's key of capture_facts


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
            store = Cache()
            store.check()  # a folder of the user's: refused before anything is read
            if store.limit > 0:  # a limit of 0 caches nothing (`harness cache --max-size 0`)
                with contextlib.suppress(OSError):
                    entry = store.entry(path, version)
                    meta = entry.meta()
                    self.notes += entry.notes  # what opening it found wrong (and removed, or refused)
                    if entry.refused is None:  # a link or another user's folder: not used
                        self._entry, self._entry_ready = entry, meta is not None
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
        """Rows of `frame` in the source (before rows that cannot be right are left out): of a column in
        memory, else as a cached column's footer says, else the source's count; no column is read for it."""
        if not self.has(frame):
            return 0
        if have := self._data[frame]:
            return len(next(iter(have.values())))
        entry = self._entry if self._entry_ready else None
        rows = entry.rows(frame, FRAMES[frame]) if entry is not None else None
        return int(self.reader.count(frame)) if rows is None else rows

    def has(self, frame: str) -> bool:
        """Whether `frame` has rows, from the metadata alone."""
        return bool(self.meta.get("nonempty", {}).get(frame, False))

    def capture_facts(self) -> dict[str, int | bool]:
        """What capture health asks of an nsys export and its frames do not keep (NsysReader.capture_facts:
        NVTX traced, its ranges, those never closed; empty for other formats): read from the source once,
        then kept with the meta, in the cache too (a later command does not open the source for them)."""
        if FACTS not in self.meta:
            self.meta[FACTS] = self.reader.capture_facts() if self.format == "nsys-sqlite" else {}
            if self.cache_entry is not None:
                with contextlib.suppress(OSError):
                    self.cache_entry.remember(FACTS, self.meta[FACTS])
        return self.meta[FACTS]

    def require(self, frame: str, what: str) -> None:
        """Raise ExportError ("no WHAT in PATH: hint") unless `frame` has rows: NoData where none was
        recorded; plain where the file holds no events (a memory timeline) or all were unusable (damaged)."""
        if not self.has(frame):
            hint = self.meta.get("hints", {}).get(frame, "record it with the matching trace option")
            if self.meta.get("not_events") or frame in self.meta.get("left_out", ()):
                raise ExportError(f"no {what} in {self.path}: {hint}")
            raise NoData(what, self.path, hint)

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
        of them: a frame the reader reads in chunks (an nsys export's) goes to the cache a chunk at a time,
        another (a Kineto trace's) is read whole and let go. False without a writable cache, or when it
        fills up (said): then `load` scans each table once. `summary` stages what its tables read, then
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
            if source is None:
                self._columns(frame, cols, keep=False)
            else:
                writer = self._writer(frame, cols)
                if writer is None:
                    return False
                try:
                    for block in source:
                        writer.write(block)
                    writer.close()
                except OSError as e:  # a full disk
                    self._unwritable(e)
                    return False
                finally:
                    writer.abort()  # what a failure left half-written (nothing, after close)
            if self._entry is None:  # the cache folder turned out not writable
                return False
        return True

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
        Categoricals, nvtx's payload as pandas' IntegerArray."""
        note = self.note if notes is None else functools.partial(_add_note, notes)
        cols, check = self._checked(frame, columns)
        wanted = list(dict.fromkeys([*cols, *check]))
        named = [c for c in cols if c.endswith("name_id")]
        strings = None
        n = bad = wild = 0
        missing = dict.fromkeys(named, 0)
        for raw in self._raw_blocks(frame, wanted, rows):
            if named and strings is None:  # once the export's scan is under way: SQLite works meanwhile
                strings = np.sort(np.fromiter(self._string_table.keys(), dtype=np.int64))
                if not len(strings):
                    raise ExportError(
                        f"{self.path} has no string table (StringIds), so its {NAMES_OF[frame]} have no "
                        "names: export it again from the report"
                    )
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
                yield {c: rows_of(data[c], lo, lo + rows) for c in columns}
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
                yield {c: rows_of(data[c], lo, lo + rows) for c in columns}
            return
        writer = self._writer(frame, [c for c in columns if entry is None or not entry.has(frame, c)])
        try:
            for block in source:
                if writer is not None:
                    writer = self._write_block(writer, block)
                total = len(block[columns[0]])
                for lo in range(0, total, rows):
                    yield {c: block[c][lo : lo + rows] for c in columns}
            if writer is not None:
                try:
                    writer.close()
                except OSError as e:
                    self._unwritable(e)
                    writer.abort()
                writer = None
        finally:
            if writer is not None:
                writer.abort()

    def _write_block(self, writer: Any, block: Mapping[str, Any]) -> Any:
        """The writer after `block` went to the cache; None when the cache cannot take it (a full disk):
        the command goes on from the source."""
        try:
            writer.write(block)
        except OSError as e:  # write() aborted: nothing of this frame is left half-written
            self._unwritable(e)
            return None
        return writer

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
                df = empty_frame(missing)
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
        said = self._entry.unwritable(e) if self._entry is not None else None
        if said is not None:
            self.note(said)
        self._entry = None


def _add_note(notes: list[str], text: str) -> None:
    if text not in notes:
        notes.append(text)
