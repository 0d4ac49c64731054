"""What every rule of `nsys analyze` shares: its reading of an export (the rows inside the start=, end= and
nvtx= options, at most rows= of them out), SQL's LIKE, and the process id of nsys's global ids."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.errors import AnalysisError
from analysis.readers.global_ids import PROCESS_MASK, pid_of, tid_of
from analysis.trace.trace import Trace

DEFAULT_ROWS = 50
LAST_NS = 0x7FFFFFFFFFFFFFFF  # nsys's end when only start= is given


class Skipped(AnalysisError):
    """nsys skips a rule when the export lacks the data it reads: say so, in one line."""


def like(pattern: str) -> re.Pattern[str]:
    """SQL LIKE as SQLite has it (ASCII letters case-insensitive, % any run, _ one character) as a regex."""
    parts = (".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.compile("".join(parts), re.IGNORECASE | re.ASCII | re.DOTALL)


@dataclass(frozen=True)
class Window:
    """What nsys's start=, end= and nvtx= options keep of a table: rows that overlap [start, end) (start
    inside, end inside, or both outside around it); with nvtx=, only the range's thread (its process where
    the range's thread id equals its process id, as nsys tells a start/end range) in tables of calls, only
    its process in tables of GPU work; with 2023.4's process= and thread= (cuda_api_sync's), only that
    process, only that thread in tables of calls. Tables a rule reads by `main.` (the calls
    cuda-*-memcpy and cuda-sync-memset join) are never cut."""

    start: int = 0
    end: int = LAST_NS
    global_tid: int | None = None
    whole: bool = True
    pid: int | None = None
    tid: int | None = None

    def keep(self, df: pd.DataFrame, who: str) -> np.ndarray:
        """Rows of `df` (start, end and `who`: global_tid or global_pid) inside the window."""
        if self.whole:
            return np.ones(len(df), dtype=bool)
        s, e, lo, hi = df["start"].to_numpy(), df["end"].to_numpy(), self.start, self.end
        keep = ((s >= lo) & (s < hi)) | ((e >= lo) & (e < hi)) | ((s < lo) & (e >= hi))
        ids = df[who].to_numpy()
        if self.global_tid is not None:
            keep &= in_range_thread(ids, self.global_tid, who == "global_tid")
        if self.pid is not None or self.tid is not None:
            keep &= chosen(ids, self.pid, self.tid, who == "global_tid")
        return keep


def chosen(ids: np.ndarray, pid: int | None, tid: int | None, threads: bool) -> np.ndarray:
    """process= and thread= (2023.4): the process of every id, the thread of ids of threads."""
    keep = np.ones(len(ids), dtype=bool)
    if pid is not None:
        keep &= pid_of(ids) == pid
    if tid is not None and threads:
        keep &= tid_of(ids) == tid
    return keep


def in_range_thread(ids: np.ndarray, range_tid: int, threads: bool) -> np.ndarray:
    """nvtx='s cut by thread: for ids of threads (`threads`), the range's own thread, unless its thread
    id equals its process id (nsys takes such a range for a start/end range, and keeps its process); for
    ids of processes, the range's process. The process part compared is everything above bit 24."""
    pid, tid = int(pid_of(range_tid)), int(tid_of(range_tid))
    if threads and pid != tid:
        return ids == range_tid
    return (ids & PROCESS_MASK) == (range_tid & PROCESS_MASK)


def _range_index(nvtx: str) -> tuple[str, int]:
    """nsys 2023.4's `TEXT/N`: the N-th such range (from 0) by start; a suffix that is not a number is
    part of the name."""
    name, slash, number = nvtx.rpartition("/")
    if slash and number.isdigit():
        return name, int(number)
    return nvtx, 0


def window(
    trace: Trace,
    start: int | None,
    end: int | None,
    nvtx: str | None,
    *,
    process: int | None = None,
    thread: int | None = None,
    nsys: str = "2022.4",
) -> Window:
    """The window of the options; nvtx= names `TEXT` or `TEXT@DOMAIN`, the first such range by start
    (2023.4: `TEXT[@DOMAIN]/N`, the N-th); process= and thread= below 0 keep every one."""
    process = None if process is None or process < 0 else process
    thread = None if thread is None or thread < 0 else thread
    if start is None and end is None and nvtx is None and process is None and thread is None:
        return Window()
    if nvtx is not None and (process is not None or thread is not None):
        raise AnalysisError("the nvtx option cannot be used with process or thread")
    range_tid = None
    if nvtx is not None:
        name, index = _range_index(nvtx) if nsys != "2022.4" else (nvtx, 0)
        ranges = (
            trace.frame("nvtx", ["start", "end", "global_tid", "name", "domain"])
            if trace.has("nvtx")
            else None
        )
        if ranges is None or ranges.empty:
            raise AnalysisError(f"NVTX range {nvtx!r} could not be found: {trace.path} has no NVTX ranges")
        domain = ranges["domain"].astype(object)
        full = ranges["name"].astype(str) + np.where(domain.isna(), "", "@" + domain.fillna("").astype(str))
        found = ranges[full.to_numpy() == name].sort_values("start", kind="stable")
        if len(found) <= index:
            raise AnalysisError(f"NVTX range {nvtx!r} could not be found in {trace.path}")
        first = found.iloc[index]
        start = int(first["start"]) if start is None else start
        end = int(first["end"]) if end is None else end
        range_tid = int(first["global_tid"])
    start, end = (0 if start is None else start), (LAST_NS if end is None else end)
    if start > end:
        raise AnalysisError(
            f"start={start} is after end={end}: the start time cannot be greater than the end"
        )
    return Window(start, end, range_tid, whole=False, pid=process, tid=thread)


@dataclass(frozen=True)
class Query:
    """A rule's reading of one trace: the rows in the window, at most `rows` of them out (negative: all)."""

    trace: Trace
    rows: int = DEFAULT_ROWS
    window: Window = field(default_factory=Window)
    nsys: str = "2022.4"  # whose output: "2022.4" or "2023.4" (the rules' new names)

    def frame(self, frame: str, columns: list[str], who: str) -> pd.DataFrame:
        df = self.trace.frame(frame, list(dict.fromkeys(["start", "end", who, *columns])))
        keep = self.window.keep(df, who)
        return df if keep.all() else df[keep].reset_index(drop=True)

    def limit(self, df: pd.DataFrame) -> pd.DataFrame:
        """SQL's LIMIT: a negative limit keeps every row."""
        return (df.head(self.rows) if self.rows >= 0 else df).reset_index(drop=True)
