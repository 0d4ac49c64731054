"""Where GPU time goes, as Holistic Trace Analysis (HTA 0.5.0) computes it, per rank (one trace per rank).

- temporal_breakdown: idle, compute and non-compute time within the span from the first GPU event's start
  to the last one's end ("kernel time" in HTA): idle is the span less the union of all GPU events, compute
  the union of COMPUTATION events, non-compute the rest (memory, communication, syncs).
- kernel_type_breakdown: time in each kernel type's union, overlaps split out ("A overlapping B").
- kernel_breakdown: per type and name, total/count/avg/min/max/stddev; past `num_kernels` names or past
  `duration_ratio` of the cumulative time a type's names fold into one row `others`, whose Avg/Min/Max/
  StdDev are over the folded names' totals (HTA's rule), not over events.
- idle_time_breakdown / idle_interval_stats: per stream, each gap before a kernel, copy or set is
  host_wait (its launch call started after the stream's previous work ended: the CPU was late),
  kernel_wait (a gap under `consecutive_kernel_delay`, 30 µs: launch overhead) or other. The gap is
  measured from the end of the stream's busy time so far (the union of its earlier events), and is 0
  for an event that starts while the stream is still busy: the gaps of a stream add up to its span less
  the union of its events, as the temporal breakdown counts idle time. HTA measures each gap from the
  end of the previous event alone, so an event that overlaps the one before it (on one stream they
  cannot both run: their times are off) gets a negative gap, and kernel_wait can fall below 0 and
  host_wait pass 100 %; with HTA's rules (`--hta`, analysis.hta.hta_rules) its arithmetic is kept, for
  parity, and a note says how many gaps are negative. An event recorded twice (the same start, end,
  stream and correlation id) counts once, with a note.
- comm_comp_overlap: the share of communication time during which computation also ran.
- queue_length_summary: outstanding launches per stream (+1 at a launch call, -1 when its GPU event starts).

Every table is in nanoseconds ("(ns)" columns) and takes `hta_rules`: False (default) computes on the
trace's exact times and every event; True applies HTA's load rules first (analysis.hta.hta_rules: the last
profiler step dropped, float timestamps rounded inward to whole µs), which gives HTA's numbers: divide
"(ns)" by 1000 for HTA's "(us)". Each function takes one trace or several (one per rank).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.errors import ExportError
from analysis.hta.gpu_events import (
    COMPUTATION,
    KERNEL_TYPES,
    MEMORY,
    gpu_events,
    merge,
    rank_of,
    sweep,
    types_of,
)
from analysis.hta.hta_rules import HtaView, hta_view
from analysis.joins.runtime import _call_key, _lookup, plain_name
from analysis.readers.global_ids import PROCESS_MASK
from analysis.trace.trace import NULL, Trace

Traces = Trace | Sequence[Trace]
CONSECUTIVE_KERNEL_DELAY_NS = 30_000  # HTA's default: gaps under 30 µs are launch overhead
IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")
# CUDA calls that put work on a stream (HTA's list, CUDA and HIP)
LAUNCH_CALLS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync",
    "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipMemsetAsync", "hipMemcpyAsync", "hipMemcpyWithStream",
})  # fmt: skip
TEMPORAL_COLUMNS = [
    "Rank", "Idle Time (ns)", "Compute Time (ns)", "Non-compute Time (ns)", "Kernel Time (ns)", "Idle (%)",
    "Compute (%)", "Non-compute (%)",
]  # fmt: skip
KERNEL_COLUMNS = [
    "Kernel Type", "Name", "Total Time (ns)", "Instances", "Avg (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)",
    "Rank",
]  # fmt: skip
FOLD_NAMES = {"name": "Name", "sum": "Total Time (ns)", "count": "Instances", "mean": "Avg (ns)",
              "min": "Min (ns)", "max": "Max (ns)", "std": "StdDev (ns)"}  # fmt: skip
STATS = [("count", "Count"), ("mean", "Avg"), ("std", "StdDev"), ("min", "Min"), ("25%", "25%"),
         ("50%", "Med"), ("75%", "75%"), ("max", "Max")]  # fmt: skip


def _traces(traces: Traces, hta_rules: bool) -> list[Trace]:
    """The traces (as HTA loads them with `hta_rules`), one per rank: two of one rank are refused."""
    items = [traces] if isinstance(traces, Trace) else list(traces)
    first: dict[int, Trace] = {}
    for t in items:
        rank = rank_of(t)
        if rank in first:
            raise ExportError(
                f"rank {rank} is given twice ({first[rank].path} and {t.path}): give one trace per rank (its "
                "rank: the one it records, a Kineto trace's distributedInfo.rank, else rank<R> in its file "
                "name)"
            )
        first[rank] = t
    return [hta_view(t) if hta_rules else t for t in items]


def _notes(traces: list[Trace]) -> list[str]:
    return list(dict.fromkeys(n for t in traces for n in t.notes))


def temporal_breakdown(traces: Traces, *, hta_rules: bool = False) -> pd.DataFrame:
    """Idle, compute and non-compute GPU time per rank (TEMPORAL_COLUMNS; percentages of the kernel time
    to 2 decimals, as HTA prints them)."""
    items = _traces(traces, hta_rules)
    rows = []
    for t in items:
        ev = gpu_events(t)
        start, end = ev["start"].to_numpy(), ev["end"].to_numpy()
        s, e = merge(start, end)
        span = int(e[-1] - s[0])
        idle = span - int((e - s).sum())
        cs, ce = merge(start[types_of(ev) == COMPUTATION], end[types_of(ev) == COMPUTATION])
        compute = int((ce - cs).sum())
        rows.append([rank_of(t), idle, compute, span - compute - idle, span])
    out = pd.DataFrame(rows, columns=TEMPORAL_COLUMNS[:5])
    for col, part in (("Idle (%)", "Idle Time (ns)"), ("Compute (%)", "Compute Time (ns)"),
                      ("Non-compute (%)", "Non-compute Time (ns)")):  # fmt: skip
        out[col] = np.round(100 * (out[part] / out["Kernel Time (ns)"]), 2)
    out.attrs.update(notes=_notes(items), digits={c: 2 for c in TEMPORAL_COLUMNS[5:]})
    return out


def hta_difference(traces: Traces, table: pd.DataFrame) -> list[str]:
    """What HTA would report instead of `table` (temporal_breakdown without its load rules): a note per
    rank whose idle time HTA's rules change, by how much and why; none where they change nothing."""
    views = _traces(traces, True)
    theirs = temporal_breakdown(views, hta_rules=True).set_index("Rank")["Idle Time (ns)"]
    rules = [n.removeprefix("HTA's load rules: ") for n in _notes(views) if n.startswith("HTA's load rules")]
    why = "; ".join(rules) or "its load rules"
    notes = []
    for rank, ours in zip(table["Rank"], table["Idle Time (ns)"], strict=True):
        hta = theirs.get(rank)
        if hta is None or hta == ours:
            continue
        than = "less" if hta < ours else "more"
        notes.append(
            f"rank {rank}: HTA reports {hta / 1e6:,.3f} ms idle, {abs(ours - hta) / 1e6:,.3f} ms {than} than "
            f"{ours / 1e6:,.3f} ms here, because HTA's loader changes the trace ({why}); this table keeps "
            "every event at its exact time, --hta applies HTA's rules"
        )
    return notes


def kernel_type_breakdown(
    traces: Traces, *, hta_rules: bool = False, include_memory: bool = True
) -> pd.DataFrame:
    """Time in the union of each kernel type, overlaps of types split out, summed over ranks: Kernel Type,
    Total Time (ns), Time (%) (of the listed total, 1 decimal), largest first."""
    items = _traces(traces, hta_rules)
    types = KERNEL_TYPES if include_memory else tuple(k for k in KERNEL_TYPES if k != MEMORY)
    labels = {
        mask: " overlapping ".join(k for i, k in enumerate(types) if mask & (1 << i))
        for mask in range(1, 1 << len(types))
    }
    parts = []
    for t in items:
        ev = gpu_events(t)
        kind = types_of(ev)
        start, end = ev["start"].to_numpy(), ev["end"].to_numpy()
        state, lo, hi = sweep([merge(start[kind == k], end[kind == k]) for k in types])
        busy = state > 0
        parts.append(
            pd.DataFrame({"Kernel Type": [labels[m] for m in state[busy]], "t": hi[busy] - lo[busy]})
        )
    df = pd.concat(parts, ignore_index=True)
    out = df.groupby("Kernel Type")["t"].agg(["sum"]).reset_index()
    out = out.sort_values(by=["sum"], ignore_index=True, ascending=False)
    out["Time (%)"] = np.round((out["sum"] / out["sum"].sum()) * 100, 1)
    out = out.rename(columns={"sum": "Total Time (ns)"}).astype({"Total Time (ns)": np.int64})
    out.attrs["notes"] = _notes(items)
    return out


def kernel_breakdown(
    traces: Traces,
    *,
    hta_rules: bool = False,
    duration_ratio: float = 0.8,
    num_kernels: int = 10,
    include_memory: bool = True,
) -> pd.DataFrame:
    """Per kernel type and name (KERNEL_COLUMNS), sorted by type, name, rank. Per type, the names past the
    `num_kernels` largest or past `duration_ratio` of the type's cumulative time fold into `others`
    (duration_ratio=1, num_kernels=10**9 folds nothing)."""
    items = _traces(traces, hta_rules)
    types = KERNEL_TYPES if include_memory else tuple(k for k in KERNEL_TYPES if k != MEMORY)
    parts = []
    for t in items:
        ev = gpu_events(t)
        data = pd.DataFrame(
            {"name": ev["name"].astype(str), "dur": ev["end"] - ev["start"], "type": types_of(ev)}
        )
        for kind in types:
            part = _fold(data[data["type"] == kind], num_kernels, duration_ratio)
            parts.append(part.assign(**{"Kernel Type": kind, "Rank": rank_of(t)}))
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=KERNEL_COLUMNS)
    out = out.rename(columns=FOLD_NAMES)
    out = out.sort_values(by=["Kernel Type", "Name", "Rank"], ignore_index=True)[KERNEL_COLUMNS]
    out = out.astype({"Total Time (ns)": np.int64, "Instances": np.int64, "Min (ns)": np.int64,
                      "Max (ns)": np.int64, "Rank": np.int64})  # fmt: skip
    out.attrs["notes"] = _notes(items)
    return out


def _fold(events: pd.DataFrame, num_kernels: int, duration_ratio: float) -> pd.DataFrame:
    """HTA's _aggr_gpu_kernel_time on durations in ns, plus the count of events of each row."""
    g = events.groupby(by=["name"])["dur"]
    per = g.agg(["sum", "max", "min", "mean", "std"]).join(g.size().rename("count")).reset_index()
    per = per.sort_values(by=["sum"], ascending=False, ignore_index=True)
    per = per.fillna({"std": 0})
    if per.shape[0] <= num_kernels:
        return per
    cumsum = per["sum"].cumsum()
    per.loc[cumsum > cumsum.quantile(duration_ratio), "name"] = "others"
    per.loc[per.index >= num_kernels, "name"] = "others"
    folded = per.groupby(by=["name"])["sum"].agg(["sum", "max", "min", "mean", "std"])
    folded = folded.join(per.groupby("name")["count"].sum()).reset_index()
    return folded.fillna({"std": 0})


def comm_comp_overlap(traces: Traces, *, hta_rules: bool = False) -> pd.DataFrame:
    """Per rank, the share of communication time (union of COMMUNICATION events) during which computation
    ran too: Rank, Comm/Comp Overlap (%) (2 decimals; NaN without communication kernels)."""
    items = _traces(traces, hta_rules)
    rows = []
    for t in items:
        ev = gpu_events(t)
        kind = types_of(ev)
        start, end = ev["start"].to_numpy(), ev["end"].to_numpy()
        comm = merge(start[kind == "COMMUNICATION"], end[kind == "COMMUNICATION"])
        comp = merge(start[kind == COMPUTATION], end[kind == COMPUTATION])
        state, lo, hi = sweep([comm, comp])
        both = int((hi - lo)[state == 3].sum())
        total = int((comm[1] - comm[0]).sum())
        rows.append((rank_of(t), np.round(100 * (both / total), 2) if total else np.nan))
    out = pd.DataFrame(rows, columns=["Rank", "Comm/Comp Overlap (%)"])
    out.attrs.update(notes=_notes(items), digits={"Comm/Comp Overlap (%)": 2})
    return out


def idle_intervals(
    trace: Trace, notes: list[str] | None = None, events: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Every kernel, copy and set with the gap before it on its stream (NaN for a stream's first) and the
    gap's category: Stream, start, end, gap (ns), category, and the stream's global_pid and device. Streams
    in increasing order (a stream id used on several devices or by several processes: each of them in
    turn). The gap runs from the end of the stream's busy time so far (0 when the event starts inside it),
    or, for a trace seen with HTA's rules (HtaView), from the previous event's end as HTA measures it.
    `notes` gets what was counted once or measured HTA's way. `events`: the trace's gpu_events, where the
    caller has them."""
    hta = isinstance(trace, HtaView)
    ev = gpu_events(trace) if events is None else events
    ev = ev[ev["kind"] != "sync"]  # HTA leaves cuda_sync events out here
    # one event recorded twice (duplicated rows of a damaged export) is one event: its copy would make a
    # gap of minus its duration
    n = len(ev)
    ev = ev.drop_duplicates(["stream", "device", "global_pid", "start", "end", "correlation_id"])
    ev = ev.reset_index(drop=True)
    if n > len(ev) and notes is not None:
        notes.append(
            f"idle time: {n - len(ev):,} kernels, copies or sets recorded twice (the same stream, start, end "
            "and correlation id: a damaged export) counted once"
        )
    launch = _launch_start(trace, ev)
    # a stream is a stream of one device of one process (two GPUs' default streams share an id); HTA's
    # traces are one rank each, and it keys by the id alone
    lanes = (
        [ev["stream"].to_numpy()] if hta else [ev[c].to_numpy() for c in ("global_pid", "device", "stream")]
    )
    order = np.lexsort((ev["start"].to_numpy(), *lanes))
    stream = ev["stream"].to_numpy()[order]
    start, end, launch = ev["start"].to_numpy()[order], ev["end"].to_numpy()[order], launch[order]
    first = np.zeros(len(order), dtype=bool)
    first[:1] = True
    for lane in lanes:
        first[1:] |= lane[order][1:] != lane[order][:-1]
    run = np.cumsum(first)  # which stream of which device each event is on
    busy = end if hta else pd.Series(end).groupby(run).cummax().to_numpy()  # busy until, so far
    prev_end = np.where(first, 0, np.roll(busy, 1))
    gap = np.where(first, np.nan, (start - prev_end).astype(np.float64))
    overlapped = ~first & (start < prev_end)
    if overlapped.any() and notes is not None:
        n = int(overlapped.sum())
        events = f"{n:,} kernels, copies or sets start" if n > 1 else "1 kernel, copy or set starts"
        them, their, gaps = ("them", "their", "their gaps are") if n > 1 else ("it", "its", "its gap is")
        if hta:
            notes.append(
                f"idle time (HTA's arithmetic): {events} before the one before {them} on {their} stream "
                f"ended; {gaps} negative ({np.nansum(gap[overlapped]) / 1e6:,.3f} ms in all), as HTA counts "
                f"{them}; without --hta a stream's idle time is its span less the union of its events"
            )
        else:
            notes.append(
                f"idle time: {events} while earlier work on {their} stream is still running (their times "
                f"overlap: one stream runs one at a time); no gap before {them}, and the stream's busy time "
                "is the union of its events"
            )
    if not hta:
        gap = np.where(overlapped, 0.0, gap)
    host = ~first & (launch != NULL) & (launch > prev_end)
    kernel = ~first & ~host & (gap < CONSECUTIVE_KERNEL_DELAY_NS)
    category = np.where(host, "host_wait", np.where(kernel, "kernel_wait", "other"))
    return pd.DataFrame(
        {
            "Stream": stream,
            "start": start,
            "end": end,
            "gap": gap,
            "category": category,
            "global_pid": ev["global_pid"].to_numpy()[order],
            "device": ev["device"].to_numpy()[order],
        }
    )


def _launch_start(trace: Trace, ev: pd.DataFrame) -> np.ndarray:
    """Start of the CUDA call that launched each event (same correlation id and process), NULL if none."""
    if not trace.has("runtime"):
        return np.full(len(ev), NULL, dtype=np.int64)
    calls = trace.frame("runtime", ["start", "correlation_id", "global_tid"])
    if calls.empty:  # every call left out (no start: a damaged export)
        return np.full(len(ev), NULL, dtype=np.int64)
    found = _lookup(
        _call_key(calls["correlation_id"].to_numpy(), calls["global_tid"].to_numpy() & PROCESS_MASK),
        _call_key(ev["correlation_id"].to_numpy(), ev["global_pid"].to_numpy()),
    )
    return np.where(found >= 0, calls["start"].to_numpy()[np.maximum(found, 0)], NULL)


def idle_time_breakdown(traces: Traces, *, hta_rules: bool = False) -> pd.DataFrame:
    """Idle time per rank, stream and category: Rank, Stream, Idle Category, Idle Time (ns), Share (%) of
    the stream's idle time. A category without gaps on a stream has no row (as in HTA)."""
    items = _traces(traces, hta_rules)
    said: list[str] = []
    return idle_time_table(items, [idle_intervals(t, said) for t in items], said)


def idle_time_table(items: list[Trace], intervals: list[pd.DataFrame], said: list[str]) -> pd.DataFrame:
    """idle_time_breakdown's table of each trace's `idle_intervals` (what computing them `said`)."""
    parts = []
    for t, gaps in zip(items, intervals, strict=True):
        per = gaps.groupby(["Stream", "category"])["gap"].sum().astype(np.int64).rename("Idle Time (ns)")
        per = per.reset_index()
        idle = per["Idle Time (ns)"].astype(np.float64)  # 100 times an int64 of 10**17 ns and more wraps
        per["Share (%)"] = idle * 100.0 / idle.groupby(per["Stream"]).transform("sum")
        parts.append(per.assign(Rank=rank_of(t)))
    out = pd.concat(parts, ignore_index=True).rename(columns={"category": "Idle Category"})
    out = out[["Rank", "Stream", "Idle Category", "Idle Time (ns)", "Share (%)"]]
    out.attrs["notes"] = list(dict.fromkeys([*_notes(items), *said]))
    return out


def idle_interval_stats(traces: Traces, *, hta_rules: bool = False) -> pd.DataFrame:
    """Statistics of the gaps per rank, stream and category (ns): Count, Avg, StdDev, Min, 25%, Med, 75%,
    Max. A stream's first event has no gap but its category (other) still gets a row, with Count 0."""
    items = _traces(traces, hta_rules)
    said: list[str] = []
    return idle_interval_table(items, [idle_intervals(t, said) for t in items], said)


def idle_tables(traces: Traces, *, hta_rules: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """idle_time_breakdown and idle_interval_stats, of one computation of the idle intervals."""
    items = _traces(traces, hta_rules)
    said: list[str] = []
    intervals = [idle_intervals(t, said) for t in items]
    return idle_time_table(items, intervals, said), idle_interval_table(items, intervals, said)


def idle_interval_table(items: list[Trace], intervals: list[pd.DataFrame], said: list[str]) -> pd.DataFrame:
    """idle_interval_stats's table of each trace's `idle_intervals` (what computing them `said`)."""
    parts = []
    for t, gaps in zip(items, intervals, strict=True):
        stats = gaps.groupby(["Stream", "category"])["gap"].describe().reset_index()
        parts.append(stats.assign(Rank=rank_of(t)))
    out = pd.concat(parts, ignore_index=True)
    out = out.rename(columns={"category": "Idle Category", **{k: f"{v} (ns)" for k, v in STATS[1:]}})
    out = out.rename(columns={"count": "Count"}).astype({"Count": np.int64})
    out = out[["Rank", "Stream", "Idle Category", "Count", *(f"{v} (ns)" for _, v in STATS[1:])]]
    out.attrs["notes"] = list(dict.fromkeys([*_notes(items), *said]))
    return out


def queue_length_summary(
    traces: Traces, *, hta_rules: bool = False, launches_first: bool = True
) -> pd.DataFrame:
    """Statistics of each stream's queue length (launch calls whose GPU work has not started), taken at
    every change: Rank, Stream, Count, Avg, StdDev, Min, 25%, Med, 75%, Max. At equal timestamps a launch
    counts before a GPU start (`launches_first=False`: after). HTA leaves that order to an unstable sort, so
    its Avg and StdDev lie between the two (docs/analysis.md)."""
    items = _traces(traces, hta_rules)
    parts = []
    for t in items:
        q = queue_lengths(t, launches_first=launches_first)
        stats = q.groupby("Stream")["length"].describe().reset_index()
        parts.append(stats.assign(Rank=rank_of(t)))
    out = pd.concat(parts, ignore_index=True)
    out = out.rename(columns={"count": "Count", **{k: v for k, v in STATS[1:]}}).astype({"Count": np.int64})
    out = out[["Rank", "Stream", "Count", *(v for _, v in STATS[1:])]]
    out.attrs["notes"] = _notes(items)
    return out


def queue_lengths(trace: Trace, *, launches_first: bool = True) -> pd.DataFrame:
    """The queue length of each stream after each change: Stream, time (ns), length. A launch adds one at
    its call's start, once per GPU event it launched; the event's start takes one away."""
    ev = gpu_events(trace)
    trace.require("runtime", "CUDA runtime calls (needed for queue lengths)")
    calls = trace.frame("runtime", ["start", "correlation_id", "global_tid", "name_id"])
    names = {i: plain_name(n) for i, n in trace.strings(calls["name_id"].unique()).items()}
    calls = calls[calls["name_id"].map(names).isin(LAUNCH_CALLS).to_numpy()].reset_index(drop=True)
    call_key = _call_key(calls["correlation_id"].to_numpy(), calls["global_tid"].to_numpy() & PROCESS_MASK)
    found = _lookup(call_key, _call_key(ev["correlation_id"].to_numpy(), ev["global_pid"].to_numpy()))
    launched = found >= 0
    n = int(launched.sum())
    stream = np.tile(ev["stream"].to_numpy()[launched], 2)
    times = np.concatenate([calls["start"].to_numpy()[found[launched]], ev["start"].to_numpy()[launched]])
    step = np.repeat(np.array([1, -1], dtype=np.int64), n)
    tie = step if not launches_first else -step  # lexsort: smaller first
    order = np.lexsort((tie, times, stream))
    s, cum = stream[order], np.cumsum(step[order])
    first = np.ones(len(order), dtype=bool)
    first[1:] = s[1:] != s[:-1]
    before = np.concatenate([[0], cum[:-1]])  # running total before each stream's first change
    start_of_run = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    return pd.DataFrame({"Stream": s, "time": times[order], "length": cum - before[start_of_run]})
