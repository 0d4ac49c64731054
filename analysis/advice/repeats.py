"""GPU work and NVTX ranges recorded twice (rows equal in every time and id), in an nsys export or a Kineto
trace: a capture health check (analysis.advice.health)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.advice.checks import FAIL, OK, Check, quote
from analysis.hta.gpu_events import gpu_events
from analysis.trace.frames import GPU_WORK
from analysis.trace.trace import Trace
from workloads.names import counted


def recorded_once(trace: Trace) -> Check:
    """GPU work recorded twice (rows equal in every time and id): per-kernel tables count every row, as
    `nsys stats` does of an export and HTA of a Kineto trace (the evidence names the one of its source), so
    a row recorded twice doubles its kernel's count and time there, while the breakdown's busy and idle
    times count it once: the numbers disagree, and this check fails saying why.
    Work overlapping earlier work on its stream (a stream runs one thing at a time, so the times are off)
    is named in the evidence."""
    name = "GPU work recorded once"
    nsys = trace.format == "nsys-sqlite"
    fix = (
        "a damaged export (rows written twice): export the report again"
        if nsys
        else "a damaged trace (events written twice): record it again"
    )
    ranges = _repeated_ranges(trace)
    said = (
        f"{counted(ranges, 'NVTX range')} {'repeats' if ranges == 1 else 'repeat'} another exactly: the NVTX "
        "tables count them twice"
    )
    if not any(trace.has(f) for f in GPU_WORK):
        return Check(name, FAIL, said, fix) if ranges else Check(name, OK, "no GPU work in the trace")
    ev = gpu_events(trace)
    work = (ev["kind"] != "sync").to_numpy()
    if not work.all():  # a copy of 1.3M events only where there are syncs to leave out
        ev = ev[work].reset_index(drop=True)
    twice = _twice(ev, ["kind", "name", "start", "end", "stream", "device", "correlation_id", "global_pid"])
    repeats = ev["kind"][twice].astype(str).value_counts()
    first = ""  # the first repeated row, named: which kernel (or copy, set) the tables count twice
    if twice.any():
        row = ev[twice.to_numpy()].iloc[0]
        first = f"; the first, {row['kind']} {quote(str(row['name']))}"
        ev = ev[~twice.to_numpy()]
    overlapping = _overlapping(ev)
    overlap = (
        f"; {overlapping:,} {'starts' if overlapping == 1 else 'start'} before earlier work on "
        f"{'its' if overlapping == 1 else 'their'} stream ended (times a little off"
        f"{'' if nsys else ', as in many Kineto traces'}: the breakdown counts a stream's busy time as the "
        "union of its events)"
        if overlapping
        else ""
    )
    if not len(repeats):
        once = (
            f"{counted(len(ev), 'kernel, copy or set', 'kernels, copies and sets')}, "
            f"{'not' if len(ev) == 1 else 'none'} recorded twice"
        )
        if ranges:
            return Check(name, FAIL, f"{said}; {once}", fix)
        return Check(name, OK, f"{once}{overlap}")
    each = ", ".join(f"{int(n):,} {kind}" for kind, n in repeats.items())
    return Check(
        name,
        FAIL,
        f"{int(twice.sum()):,} rows repeat another exactly ({each}): the kernel tables count them twice, "
        f"as {'nsys stats' if nsys else 'HTA'} does, the breakdown's busy and idle "
        f"times once{first}{overlap}" + (f"; {said}" if ranges else ""),
        fix,
    )


def _overlapping(ev: pd.DataFrame) -> int:
    """GPU events that start before earlier work on their stream (process, device, stream) ended: sorted
    by stream and start, each against the latest end of those before it on its stream."""
    if not len(ev):
        return 0
    cols = [ev[c].to_numpy() for c in ("global_pid", "device", "stream", "start", "end")]
    order = np.lexsort(cols[3::-1])  # by process, device, stream, then start; stable
    pid, device, stream, start, end = (c[order] for c in cols)
    first = np.ones(len(order), dtype=bool)  # the first event of its stream
    first[1:] = (pid[1:] != pid[:-1]) | (device[1:] != device[:-1]) | (stream[1:] != stream[:-1])
    busy = pd.Series(end).groupby(np.cumsum(first)).cummax().to_numpy()  # each stream busy until, so far
    return int(((start[1:] < busy[:-1]) & ~first[1:]).sum())


def _repeated_ranges(trace: Trace) -> int:
    """NVTX ranges equal to another in start, end, thread, name and domain: rows written twice (a program
    cannot open two ranges on one thread at the same nanosecond; none of the shared captures has one)."""
    if not trace.has("nvtx"):
        return 0
    nv = trace.frame("nvtx", ["start", "end", "global_tid", "name", "domain"])
    maybe = _sharing_start(nv)
    return int(nv[maybe].astype({"name": object, "domain": object}).duplicated().sum())


def _sharing_start(frame: pd.DataFrame) -> np.ndarray:
    """Rows whose start another row shares: the only ones that can repeat another in every column. Few are
    (none of the 1.8M ranges of benchmarks/make_big_export.py's export), so rows are compared whole only among
    them."""
    start = frame["start"].to_numpy()
    if len(start) > 1 and (start[1:] >= start[:-1]).all():  # in time order (most tables): neighbours
        same = start[1:] == start[:-1]
        return np.concatenate(([False], same)) | np.concatenate((same, [False]))
    return frame["start"].duplicated(keep=False).to_numpy()


def _twice(frame: pd.DataFrame, columns: list[str]) -> pd.Series:
    """frame.duplicated(columns), compared whole only among the rows that share a start."""
    maybe = _sharing_start(frame)
    twice = pd.Series(False, index=frame.index)
    twice[maybe] = frame[maybe].duplicated(columns).to_numpy()
    return twice
