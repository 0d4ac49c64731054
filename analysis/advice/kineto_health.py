"""Capture health of a Kineto trace (what an nsys export has no counterpart of): events the reader left out
as invalid, by reason; negative queue lengths; missing profiler steps. Events far outside the span of the
host's events (where an nsys export is held to its capture's end): analysis.advice.spans. The checks of both
formats: analysis.advice.health."""

from __future__ import annotations

from analysis.advice.checks import FAIL, OK, WARN, Check, Health
from analysis.hta.breakdown import queue_lengths
from analysis.readers.kineto_build import STEP_RE
from analysis.trace.frames import GPU_WORK
from analysis.trace.trace import Trace


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
