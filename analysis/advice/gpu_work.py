"""What the GPU work itself says about a capture: whether each kernel, copy and set has its launching call
(launch correlation), and whether nsys could name the kernels (kernel names). Launch calls without their
GPU work, the other way round, are analysis.advice.coverage's.

GPU work and calls are joined by process and correlation id (ids are unique within a process only). CUPTI
numbers a process's calls in the order they are made, so GPU work whose id is below the first call the trace
holds of its process was launched before the capture started and was still queued or running when it did:
in flight, not lost. torchrun_2gpu (31 events) and the Kineto diff-test trace (614) hold such work only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.advice.checks import FAIL, OK, WARN, Check, Health, quote
from analysis.readers import NULL
from analysis.readers.global_ids import PROCESS_MASK, pid_of
from analysis.stats import member, membership, pair_keys
from analysis.trace.frames import GPU_WORK, NAMES_OF
from analysis.trace.trace import Trace

# GPU work launched inside the capture without its launching call: from this share on the per-kernel tables
# cannot be trusted
ORPHAN_FAIL_PCT = 1.0
# kernels nsys could not name; from this share of the kernels' GPU time on, tables by name lose a part that
# moves most comparisons the harness makes (the same 2% as elsewhere)
UNKNOWN_NAMES = ("[Unknown]",)
# the events named by string id (columns other than name_id fall back to it where NULL)
NAMED = {
    "kernels": ("name_id", "short_name_id", "mangled_name_id"),
    "runtime": ("name_id",),
    "osrt": ("name_id",),
    "syncs": ("name_id",),
}
UNKNOWN_WARN_PCT = 2.0
COLUMNS = ["Kind", "Start (ns)", "Correlation ID", "PID", "Name", "Before the capture"]


def orphans(trace: Trace) -> pd.DataFrame:
    """GPU work (kernels, copies, sets) whose launching call is not in the trace: Kind, Start (ns),
    Correlation ID, PID, Name, Before the capture (its correlation id is below the first call of its
    process the trace holds: launched before the capture started)."""
    calls = (
        trace.frame("runtime", ["correlation_id", "global_tid"])
        if trace.has("runtime")
        else pd.DataFrame({"correlation_id": np.empty(0, np.int64), "global_tid": np.empty(0, np.int64)})
    )
    pids = calls["global_tid"].to_numpy() & PROCESS_MASK
    frames = [f for f in GPU_WORK if trace.has(f)]
    events = [
        trace.frame(f, ["start", "correlation_id", "global_pid"] + (["name_id"] if f == "kernels" else []))
        for f in frames
    ]
    known, keys = pair_keys(
        pids,
        calls["correlation_id"].to_numpy(),
        np.concatenate(
            [ev["global_pid"].to_numpy() & PROCESS_MASK for ev in events] or [np.empty(0, np.int64)]
        ),
        np.concatenate([ev["correlation_id"].to_numpy() for ev in events] or [np.empty(0, np.int64)]),
    )
    # a table over the keys' span where it is no longer than the calls themselves: no sort of 6M keys
    have = membership(known, len(known))(keys)
    # each process's first call, where some GPU work has no call (most captures: none)
    first = pd.Series(calls["correlation_id"].to_numpy())
    first = first.groupby(pids).min() if not have.all() else first.iloc[:0]
    bounds = np.cumsum([0, *(len(ev) for ev in events)])
    parts = []
    for frame, ev, lo, hi in zip(frames, events, bounds[:-1], bounds[1:], strict=True):
        lost = ev[~have[lo:hi]]
        names = trace.strings(lost["name_id"].unique()) if frame == "kernels" else {}
        since = (lost["global_pid"].to_numpy() & PROCESS_MASK).astype(np.int64)
        below = lost["correlation_id"].to_numpy() < pd.Series(since).map(first).to_numpy(
            dtype=float, na_value=-1
        )
        parts.append(
            pd.DataFrame(
                {
                    "Kind": NAMES_OF[frame],
                    "Start (ns)": lost["start"],
                    "Correlation ID": lost["correlation_id"],
                    "PID": pid_of(lost["global_pid"]),
                    "Name": lost["name_id"].map(names) if frame == "kernels" else "",
                    "Before the capture": below,
                }
            )
        )
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)


def launch_correlation(trace: Trace, health: Health) -> Check:
    name = "launch correlation"
    total = sum(trace.count(f) for f in GPU_WORK if trace.has(f))
    if not total:
        return Check(name, OK, "no GPU work in the trace")
    found = orphans(trace)
    if found.empty:
        every = (
            "its one kernel, copy or set has its launching call"
            if total == 1
            else f"all {total:,} kernels, copies and sets have their launching call"
        )
        return Check(name, OK, every)
    health.details["GPU work without its launch"] = found
    before = found[found["Before the capture"].astype(bool)]
    lost = found[~found["Before the capture"].astype(bool)]
    in_flight = (
        f"{len(before):,} launched before the capture started (in flight when it did: correlation ids below "
        "the first call of their process)"
    )
    if lost.empty:
        return Check(
            name,
            OK,
            f"{total - len(before):,} of {total:,} GPU events have their launching call; {in_flight}",
        )
    pct = 100 * len(lost) / total
    kinds = ", ".join(f"{n:,} {k}" for k, n in lost["Kind"].value_counts().items())
    first = lost.iloc[0]
    example = f"e.g. correlation id {first['Correlation ID']} of process {first['PID']}" + (
        f" ({quote(first['Name'], 60)})" if first["Name"] else ""
    )
    evidence = (
        f"{len(lost):,} of {total:,} GPU events ({pct:.1f}%: {kinds}) have no launching call; {example}"
    )
    return Check(
        name,
        FAIL if pct >= ORPHAN_FAIL_PCT else WARN,
        evidence + (f"; {in_flight}" if len(before) else ""),
        "the launching calls were not recorded (CUDA API tracing off or lost): tables by launch or by NVTX "
        "range leave these out",
    )


def kernel_names(trace: Trace) -> Check:
    """Rows whose name the export's string table lacks (left out of every table: a damaged export), and the
    share of kernel time under names the profiler could not resolve (`[Unknown]`)."""
    name = "kernel names"
    lost = _unnamed(trace)
    if lost:
        said = ", ".join(f"{n:,} {what}" for what, n in lost)
        return Check(
            name,
            FAIL,
            f"{said} name a string the export's string table (StringIds) lacks: every table and finding "
            "leaves them out",
            "a damaged or edited export: export the report again",
        )
    if not trace.has("kernels"):
        return Check(name, OK, "no kernels")
    kern = trace.frame("kernels", ["duration", "name_id"])
    names = trace.strings(kern["name_id"].unique())
    unknown_ids = np.array([i for i, n in names.items() if n in UNKNOWN_NAMES], dtype=np.int64)
    unknown = member(kern["name_id"].to_numpy(), unknown_ids)  # by string id: no name per kernel
    total = int(kern["duration"].sum())
    if not unknown.any():
        return Check(
            name, OK, "its one kernel named" if len(kern) == 1 else f"all {len(kern):,} kernels named"
        )
    lost = int(kern["duration"].to_numpy()[unknown].sum())
    pct = 100 * lost / total if total else 0.0
    evidence = (
        f"{int(unknown.sum()):,} of {len(kern):,} kernels named `[Unknown]`: {lost / 1e6:,.3f} ms, "
        f"{pct:.1f}% of the kernels' GPU time"
    )
    if pct < UNKNOWN_WARN_PCT:
        return Check(name, OK, f"{evidence} (below {UNKNOWN_WARN_PCT:g}%)")
    version = trace.meta.get("producer_version")
    by = f"nsys {version}" if version and trace.format == "nsys-sqlite" else "the profiler"
    return Check(
        name,
        WARN,
        evidence,
        f"{by} could not resolve these kernels' names, as a profiler older than the program's CUDA does: "
        "tables by kernel name show them as one row `[Unknown]`. Use a profiler release that supports the "
        "program's CUDA version (`harness doctor` shows the nsys in use)",
    )


def _unnamed(trace: Trace) -> list[tuple[str, int]]:
    """Per kind of event, the rows whose name id is not in the string table (a NULL one of the columns that
    fall back to the main name aside): the rows the trace leaves out with a note."""
    if not any(trace.has(f) for f in NAMED):
        return []
    strings = np.sort(np.fromiter(trace.strings().keys(), dtype=np.int64))
    out = []
    for frame, columns in NAMED.items():
        if not trace.has(frame):
            continue
        lost = None
        for col in columns:
            ids = np.asarray(trace.column(frame, col, keep=False), dtype=np.int64)
            bad = ~member(ids, strings) if col == "name_id" else ~member(ids, strings) & (ids != NULL)
            lost = bad if lost is None else lost | bad
        if lost is not None and lost.any():
            out.append((NAMES_OF[frame], int(lost.sum())))
    return out
