"""Events far outside the span of a capture's host events, where the capture keeps no span of its own that
they must lie in (a Kineto trace; an nsys export without ANALYSIS_DETAILS, as nsys 2020.3 wrote them): capture
health checks (analysis.advice.health).

The host's events (CUDA calls, operators, OS runtime calls, annotation ranges) are recorded while the program
runs, one after another: the longest gap between two starts in the shared captures is 29.9 s (alexnet's, in
a span of 43.4 s: a gap measured against the span would part it). So their core is the largest group of
starts with no gap of an hour between two; a host event that starts or ends farther outside the core's
starts than they span (at least an hour: a blocking call, a collective waiting for its peers, may last
minutes) is no time the program ran: an edited or damaged event. It is named, and the span GPU
work is held to leaves it out: a CUDA call lasting 126 years stretches no span a kernel of 10 years fits.

GPU work runs while the host's events are recorded: in the four shared Kineto traces every kernel, copy,
set and sync starts after the first CUDA call or operator and ends before the last one ends. So one that
starts or ends farther outside their span than the span itself lasts (at least a second: the GPU may run
behind the host by the work it was given) is no time the GPU ran, and stretches the GPU's span, its idle
time and every sum it is in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.advice.checks import FAIL, OK, Check, quote
from analysis.readers import NULL
from analysis.trace.trace import Trace
from workloads.names import counted

HOST_EVENTS = {"runtime": "CUDA call", "cpu_ops": "operator", "osrt": "OS runtime call", "nvtx": "range"}
HOST_FRAMES = ("runtime", "cpu_ops")  # the host's events GPU work is held to
DEVICE_FRAMES = {"kernels": "kernel", "memcpy": "memory copy", "memset": "memory set", "syncs": "sync event"}
MIN_SLACK_NS = 1_000_000_000  # GPU work
MIN_HOST_SLACK_NS = 3_600 * 10**9  # host events; also the gap that parts the host's groups of starts
DAY_NS, YEAR_NS = 86_400 * 10**9, 365 * 86_400 * 10**9


@dataclass
class HostCore:
    """The host's events in their core: the first start and last start of the core, and per host frame
    present, how far (ns, as float) each row lies outside it beyond the slack (> 0: far; NaN: untimed)."""

    first: int
    last_start: int
    far: dict[str, np.ndarray]


def host_core(trace: Trace) -> HostCore | None:
    """The core of the host's events (None where the trace has none with a start and end)."""
    times = {f: _times(trace, f) for f in HOST_EVENTS if trace.has(f)}
    starts = [s[ok] for s, _, ok in times.values()]
    if not starts or not sum(len(s) for s in starts):
        return None
    s = np.sort(np.concatenate(starts))
    cuts = np.flatnonzero(np.diff(s) > MIN_HOST_SLACK_NS)
    lo, hi = np.concatenate(([0], cuts + 1)), np.concatenate((cuts, [len(s) - 1]))
    group = int(np.argmax(hi - lo))
    first, last_start = int(s[lo[group]]), int(s[hi[group]])
    slack = max(last_start - first, MIN_HOST_SLACK_NS)
    far = {}
    for f, (start, end, ok) in times.items():
        # float: a start or end near ±2**63 would wrap round int64 here
        out = np.maximum(first - start.astype(float), end.astype(float) - last_start) - slack
        far[f] = np.where(ok, out, np.nan)
    return HostCore(first, last_start, far)


def host_span(trace: Trace, core: HostCore | None) -> Check:
    """Host events far outside `core` (host_core(trace)), the farthest named."""
    name = "host events in the trace's span"
    if core is None:
        return Check(name, OK, "no CUDA calls, operators or ranges")
    span = f"{(core.last_start - core.first) / 1e9:,.3f} s from the host's first start to its last"
    outside = sum(int((far > 0).sum()) for far in core.far.values())
    if not outside:
        return Check(name, OK, f"every CUDA call, operator and range within or near the others ({span})")
    f, row = max(((f, int(np.nanargmax(far))) for f, far in core.far.items() if (far > 0).any()),
                 key=lambda fr: core.far[fr[0]][fr[1]])  # fmt: skip
    return Check(
        name,
        FAIL,
        f"{counted(outside, 'host event')} {'lies' if outside == 1 else 'lie'} far outside the others "
        f"({span}); the farthest, {_named(trace, f, row, HOST_EVENTS[f])}, "
        f"{_when(trace, f, row, core.first)}",
        f"a damaged or edited {_source(trace)}: no such call, operator or range ran then; the tables of CUDA "
        "calls, operators and ranges count it, and the trace's span is stretched by it; record it again",
    )


def gpu_span(trace: Trace, core: HostCore | None) -> Check:
    """GPU work that starts or ends far outside the span of the host's events (HOST_FRAMES, those near
    `core`: host_core(trace)), the farthest named; rows the reader left out for a time past 2**62 ns too
    (their name is said nowhere else)."""
    name = "GPU work in the trace's span"
    device = [f for f in DEVICE_FRAMES if trace.has(f)]
    host = [(f, core.far[f] <= 0) for f in HOST_FRAMES if core is not None and f in core.far]
    host = [(f, near) for f, near in host if near.any()]
    if not device or not host:
        return Check(name, OK, "no GPU work in the trace" if not device else "no CUDA calls or operators")
    first = min(int(trace.column(f, "start", keep=False)[near].min()) for f, near in host)
    last = max(int(trace.column(f, "end", keep=False)[near].max()) for f, near in host)
    slack = max(last - first, MIN_SLACK_NS)
    outside, worst = 0, (0.0, "", -1)  # events outside; the farthest: how far, its frame, its row
    for f in device:
        start, end, timed = _times(trace, f)  # the others: `times` and `invalid events`
        far = np.where(timed, np.maximum(first - start.astype(float), end.astype(float) - last), 0.0)
        outside += int((far > slack).sum())
        if len(far) and far.max() > worst[0]:
            worst = (float(far.max()), f, int(np.argmax(far)))
    span = f"{(last - first) / 1e9:,.3f} s from the first CUDA call or operator to the last one's end"
    if not outside:
        return Check(name, OK, f"every kernel, copy, set and sync within or near the host's events ({span})")
    _, f, row = worst
    return Check(
        name,
        FAIL,
        f"{counted(outside, 'GPU event')} {'lies' if outside == 1 else 'lie'} far outside the host's events "
        f"({span}); the farthest, {_named(trace, f, row, DEVICE_FRAMES[f])}, {_when(trace, f, row, first)}",
        f"a damaged or edited {_source(trace)}: no GPU ran then, and the kernel tables, GPU time and idle "
        "time count it; record it again",
    )


def _times(trace: Trace, frame: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A frame's raw starts and ends, and which rows have both, in order (the others: `times` and `invalid
    events`)."""
    start, end = trace.column(frame, "start", keep=False), trace.column(frame, "end", keep=False)
    return start, end, (start != NULL) & (end != NULL) & (end >= start)


def _source(trace: Trace) -> str:
    return "export" if trace.format == "nsys-sqlite" else "trace"


def _named(trace: Trace, frame: str, row: int, what: str) -> str:
    """What an event is, with its name where its frame has one."""
    if frame == "nvtx":
        return f"{what} {quote(str(trace.column(frame, 'name', keep=False)[row]))}"
    if frame in ("memcpy", "memset"):
        return what
    name_id = int(trace.column(frame, "name_id", keep=False)[row])
    return f"{what} {quote(trace.strings([name_id]).get(name_id, '?'))}"


def _when(trace: Trace, frame: str, row: int, first: int) -> str:
    start, end = (int(trace.column(frame, c, keep=False)[row]) for c in ("start", "end"))
    return f"starts at {(start - first) / 1e9:,.3f} s and lasts {_lasting(end - start)}"


def _lasting(ns: int) -> str:
    """A duration in seconds, and in days or years where it is that long."""
    said = f"{ns / 1e9:,.3f} s"
    if ns >= YEAR_NS:
        return f"{said} ({ns / YEAR_NS:,.1f} years)"
    return f"{said} ({ns / DAY_NS:,.1f} days)" if ns >= DAY_NS else said
