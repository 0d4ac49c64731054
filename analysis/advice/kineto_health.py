"""Capture health of a Kineto trace (what an nsys export has no counterpart of): events the reader left out
as invalid, by reason; GPU work far outside the span of the host's events (where an nsys export is held to
its capture's end); negative queue lengths; missing profiler steps. The checks of both formats:
analysis.advice.health."""

from __future__ import annotations

import numpy as np

from analysis.advice.checks import FAIL, OK, WARN, Check, Health, quote
from analysis.hta.breakdown import queue_lengths
from analysis.readers import NULL
from analysis.readers.kineto_build import STEP_RE
from analysis.trace.frames import GPU_WORK
from analysis.trace.trace import Trace
from workloads.names import counted

# GPU work runs while the host's events are recorded: in the four shared traces every kernel, copy, set and
# sync starts after the first CUDA call or operator and ends before the last one ends. So one that starts or
# ends farther outside their span than the span itself lasts (at least a second: the GPU may run behind
# the host by the work it was given) is no time the GPU ran: an edited or damaged event, which stretches the
# GPU's span, its idle time and every sum it is in.
HOST_FRAMES = ("runtime", "cpu_ops")
DEVICE_FRAMES = {"kernels": "kernel", "memcpy": "memory copy", "memset": "memory set", "syncs": "sync event"}
MIN_SLACK_NS = 1_000_000_000
DAY_NS, YEAR_NS = 86_400 * 10**9, 365 * 86_400 * 10**9


def left_out(trace: Trace) -> Check:
    """Events left out as invalid, by reason; a trace with no event in any table (empty, or JSON that only
    looks like a trace: a memory timeline's list) fails, as an nsys export without events does."""
    name = "invalid events"
    unusable = int(trace.meta.get("unusable", 0) or 0)
    ignored = trace.meta.get("ignored", {}) or {}
    modelled = ("kernels", "runtime", "memcpy", "memset", "nvtx", "cpu_ops", "syncs")
    for frame in modelled:
        if trace.has(frame):
            trace.rows_ok(frame, ["start", "end"])  # notes what cannot be right
    left = [n for n in trace.notes if n.startswith("left out")]
    kept = ", ".join(f"{n:,} {k}" for k, n in sorted(ignored.items(), key=lambda kv: -kv[1]))
    evidence = f"{unusable:,} events without a usable ts or dur" + (f"; {'; '.join(left)}" if left else "")
    evidence += f"; not modelled (flows, instants): {kept}" if kept else ""
    if not any(trace.count(f) for f in modelled if trace.has(f)):
        return Check(
            name,
            FAIL,
            f"no event in any table (no kernel, CUDA call, operator or annotation): {evidence}",
            "pass the trace torch.profiler wrote (export_chrome_trace, tensorboard_trace_handler), with "
            "the activities to study recorded; a memory timeline (export_memory_timeline) is not one",
        )
    if unusable or left:  # as `times` fails an nsys export's rows that cannot be right
        return Check(
            name,
            FAIL,
            evidence,
            "these events are in no table, and every sum and finding misses them: the trace was cut or "
            "written by a profiler that crashed; record it again",
        )
    return Check(name, OK, evidence)


def gpu_span(trace: Trace) -> Check:
    """GPU work that starts or ends far outside the span of the host's events (HOST_FRAMES), the farthest
    named; rows the reader left out for a time past 2**62 ns too (their name is said nowhere else)."""
    name = "GPU work in the trace's span"
    device = [f for f in DEVICE_FRAMES if trace.has(f)]
    host = [
        h
        for h in (trace.frame(f, ["start", "end"], keep=False) for f in HOST_FRAMES if trace.has(f))
        if len(h)
    ]
    if not device or not host:
        return Check(name, OK, "no GPU work in the trace" if not device else "no CUDA calls or operators")
    first, last = min(int(h["start"].min()) for h in host), max(int(h["end"].max()) for h in host)
    slack = max(last - first, MIN_SLACK_NS)
    outside, worst = 0, (0.0, "", -1)  # events outside; the farthest: how far, its frame, its row
    for f in device:
        start, end = trace.column(f, "start", keep=False), trace.column(f, "end", keep=False)
        timed = (start != NULL) & (end != NULL) & (end >= start)  # the others: `times` and `invalid events`
        # float: a start or end near ±2**63 would wrap round int64 here
        far = np.where(timed, np.maximum(first - start.astype(float), end.astype(float) - last), 0.0)
        outside += int((far > slack).sum())
        if len(far) and far.max() > worst[0]:
            worst = (float(far.max()), f, int(np.argmax(far)))
    span = f"{(last - first) / 1e9:,.3f} s from the first CUDA call or operator to the last one's end"
    if not outside:
        return Check(name, OK, f"every kernel, copy, set and sync within or near the host's events ({span})")
    _, f, row = worst
    what = DEVICE_FRAMES[f]
    if f in ("kernels", "syncs"):
        name_id = int(trace.column(f, "name_id", keep=False)[row])
        what += f" {quote(trace.strings([name_id]).get(name_id, '?'))}"
    start, end = (int(trace.column(f, c, keep=False)[row]) for c in ("start", "end"))
    return Check(
        name,
        FAIL,
        f"{counted(outside, 'GPU event')} {'lies' if outside == 1 else 'lie'} far outside the host's events "
        f"({span}); the farthest, {what}, "
        f"starts at {(start - first) / 1e9:,.3f} s and lasts {_lasting(end - start)}",
        "a damaged or edited trace: no GPU ran then, and the kernel tables, GPU time and idle time count "
        "it; record the trace again",
    )


def _lasting(ns: int) -> str:
    """A duration in seconds, and in days or years where it is that long."""
    said = f"{ns / 1e9:,.3f} s"
    if ns >= YEAR_NS:
        return f"{said} ({ns / YEAR_NS:,.1f} years)"
    return f"{said} ({ns / DAY_NS:,.1f} days)" if ns >= DAY_NS else said


def queue_length_check(trace: Trace, health: Health) -> Check:
    name = "queue lengths"
    if not (trace.has("runtime") and any(trace.has(f) for f in GPU_WORK)):
        return Check(name, OK, "no launches and GPU work to count")
    q = queue_lengths(trace)
    neg = q[q["length"] < 0]
    if neg.empty:
        return Check(name, OK, f"{len(q):,} changes on {q['Stream'].nunique()} streams, none below zero")
    per = neg.groupby("Stream")["length"].agg(["count", "min"]).reset_index()
    health.details["negative queue lengths"] = per.rename(columns={"count": "Changes below 0", "min": "Min"})
    where = ", ".join(f"stream {r['Stream']}: {r['count']:,} (min {r['min']})" for _, r in per.iterrows())
    return Check(
        name,
        FAIL,
        f"{len(neg):,} of {len(q):,} queue lengths below zero ({where})",
        "GPU work starts before the call that launched it: the CPU and GPU clocks disagree, so "
        "launch delays and host-wait time are wrong for these streams",
    )


def profiler_steps(trace: Trace) -> Check:
    name = "profiler steps"
    steps: list[int] = []
    if trace.has("nvtx"):
        names = trace.frame("nvtx", ["name"])["name"].astype(str)
        numbers = names.str.extract("^" + STEP_RE.pattern, expand=False).dropna()
        steps = sorted({int(n) for n in numbers})
    if not steps:
        return Check(
            name,
            WARN,
            "no ProfilerStep#N ranges",
            "profile with a schedule and call prof.step() each step, so tables can be split by step",
        )
    missing = sorted(set(range(steps[0], steps[-1] + 1)) - set(steps))
    if missing:
        return Check(
            name,
            WARN,
            f"steps {steps[0]}..{steps[-1]}, missing {', '.join(map(str, missing))}",
            "steps are missing from the trace (trimmed or dropped): per-step figures skip them",
        )
    return Check(name, OK, f"{len(steps)} steps, #{steps[0]} to #{steps[-1]}, none missing")
