"""Capture health: can this capture be trusted? Checks of one Trace, each ok / warn / fail with its evidence
(counts, example rows) and what to do.

nsys exports: nsys's own messages (DIAGNOSTIC_EVENT) by severity; nsys's own overhead (PROFILER_OVERHEAD),
its total and how much of it falls inside each NVTX phase; CUDA traced but no kernels; NVTX traced but no
ranges; ranges still open at the end. Kineto traces (analysis.advice.kineto_health): events left out as
invalid, by reason; host events far outside the others and GPU work far outside the host's events
(analysis.advice.spans; for an nsys export without a capture end too); negative queue lengths; missing
profiler steps.
Both: GPU work whose launching call is not in the trace (joined by process and correlationId:
correlationIds are unique within a process only), coverage over time (launch calls whose GPU work is missing
and steps without their NVTX ranges, per step: analysis.advice.coverage), kernels nsys could not name, rows
written twice (analysis.advice.repeats), and times that cannot be right (in an nsys export, events past the
capture's end too; a Kineto trace records no span its events must lie in: its `Trace` event ends before
some CUDA calls of the shared nccl trace, so its GPU work is held to its host's events, loosely). What a
check is and which failures make a run degraded: analysis.advice.checks.

A check that has nothing to look at says so and is ok: a capture is not unhealthy for lacking a table that
older nsys versions never wrote.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.advice import where
from analysis.advice.base import Stop
from analysis.advice.checks import FAIL, OK, WARN, Check, Health, capture_failures, quote
from analysis.advice.coverage import coverage_of, gpu_coverage, nvtx_steps
from analysis.advice.gpu_work import kernel_names, launch_correlation
from analysis.advice.kineto_health import left_out, profiler_steps, queue_length_check
from analysis.advice.labels import label_in, labels_of
from analysis.advice.repeats import recorded_once
from analysis.advice.spans import gpu_span, host_core, host_span
from analysis.advice.verdict import keep_verdict
from analysis.hta.gpu_events import merge
from analysis.intervals import clipped_sums
from analysis.readers import NULL
from analysis.readers.global_ids import PROCESS_MASK, pid_of
from analysis.readers.nsys import LOST
from analysis.tables import stats_format
from analysis.trace.frames import NAMES_OF
from analysis.trace.trace import Trace
from workloads.names import ALL_PHASES, MEASURED, counted

# nsys's overhead inside a phase from this share of the phase's time on is worth naming (a phase time that
# moves by 2% changes the conclusion of most comparisons the harness makes)
OVERHEAD_WARN_PCT = 2.0
# the capture range of an export read alone: nsys keeps none in it (START_TRIGGER is Immediate under a range)
NOT_KNOWN = "not known"
TIMED_CHECKED = ("kernels", "runtime", "memcpy", "memset", "osrt", "nvtx", "overhead", "cpu_ops", "syncs")


def capture_health(
    trace: Trace,
    stop: Stop | None = None,
    timed: int = 0,
    warmup: int | None = None,
    capture_range: str | None = NOT_KNOWN,
) -> Health:
    """Every check that applies to `trace` (an nsys export or a Kineto trace); `stop`: the run was stopped
    before its end (its missing steps were never run); `timed`: the measured steps the run's timers timed
    (0: not known); `warmup`: its warm-up steps (None: not known), which tell the measured steps where the
    `measured` range was lost; `capture_range`: the one nsys was given (None: none; NOT_KNOWN: an export
    alone, which does not say). The verdict is kept with the export's cache entry, for its tables to say
    (analysis.advice.verdict)."""
    health = Health(str(trace.path))
    if trace.format == "nsys-sqlite":
        facts = trace.capture_facts()
        health.checks += [
            _capture_started(trace, capture_range),
            _diagnostics(trace, health),
            _overhead(trace, health),
            _cuda_without_kernels(trace),
            _nvtx_without_ranges(trace, facts),
            _open_ranges(facts, stop),
        ]
        if not isinstance(trace.meta.get("capture_end_ns"), int):  # no capture span: `times` holds no event
            core = host_core(trace)
            health.checks += [host_span(trace, core), gpu_span(trace, core)]
    else:
        core = host_core(trace)
        health.checks += [
            left_out(trace),
            host_span(trace, core),
            gpu_span(trace, core),
            queue_length_check(trace, health),
            profiler_steps(trace),
        ]
    cov = coverage_of(trace, warmup)
    health.checks += [
        launch_correlation(trace, health),
        gpu_coverage(trace, health, cov),
        nvtx_steps(trace, health, cov, stop, timed),
        kernel_names(trace),
        _times(trace),
        recorded_once(trace),
    ]
    keep_verdict(trace, [c.name for c in capture_failures(health.checks)], health.line())
    return health


# --- nsys exports --------------------------------------------------------------------------------------


# the newest nsys seen to write no DIAGNOSTIC_EVENT table (from 2020.3 on, none did; 2024.6 writes one)
NO_MESSAGES_UP_TO = (2023, 4)


def _no_messages_table(version: str | None) -> str:
    """Why an export holds no DIAGNOSTIC_EVENT table, as far as its nsys's version says: an older nsys's
    version is named only where the export's is not."""
    said = "the export holds no DIAGNOSTIC_EVENT messages"
    found = stats_format.release(version)
    if found is None:
        newest = ".".join(map(str, NO_MESSAGES_UP_TO))
        return f"{said} (it names no nsys version; nsys {newest} and older keep none)"
    if found <= NO_MESSAGES_UP_TO:
        return f"{said} (nsys {version} keeps none)"
    return f"{said} (it has no DIAGNOSTIC_EVENT table)"


def _diagnostics(trace: Trace, health: Health) -> Check:
    name = "nsys messages"
    if not trace.has("diagnostics"):
        if trace.meta.get("exists", {}).get("diagnostics"):
            return Check(name, OK, "nsys left no messages (DIAGNOSTIC_EVENT is empty)")
        return Check(name, OK, _no_messages_table(trace.meta.get("producer_version")))
    d = trace.frame("diagnostics")
    health.details["nsys messages"] = pd.DataFrame(
        {
            "Time (ns)": d["timestamp"],
            "Severity": d["severity"],
            "Source": d["source"],
            "PID": np.where(d["global_pid"] == NULL, -1, pid_of(d["global_pid"])),
            "Text": d["text"],
        }
    )
    counts = d["severity"].value_counts()
    by = ", ".join(f"{n:,} {s}" for s, n in counts.items())
    lost = d[d["text"].str.contains(LOST)]
    serious = d[d["severity"].isin(["Warning", "Error"])]
    collected = [t.replace("\t", "").strip().rstrip(".") for t in d["text"] if t.startswith("Number of ")]
    evidence = f"{len(d):,} messages ({by})" + (f"; {'; '.join(collected)}" if collected else "")
    if len(lost):
        return Check(
            name,
            FAIL,
            f"{evidence}; lost data: {quote(lost['text'].iloc[0])}",
            "events were lost: give nsys bigger buffers or a shorter capture (--capture-range)",
        )
    if len(serious):
        first = serious.iloc[0]
        return Check(
            name,
            WARN,
            f"{evidence}; first {first['severity'].lower()}: {quote(first['text'])}",
            "read the warnings and errors (table `nsys messages`): they say what nsys could not record",
        )
    return Check(name, OK, evidence)


def _overhead(trace: Trace, health: Health) -> Check:
    name = "nsys overhead"
    if not trace.has("overhead"):
        return Check(name, OK, "the export records no profiler overhead (PROFILER_OVERHEAD)")
    over = trace.frame("overhead", ["start", "end", "duration", "global_tid", "name_id"])
    names = trace.strings(over["name_id"].unique())
    by_name = (
        over.assign(Name=over["name_id"].map(names))
        .groupby("Name")["duration"]
        .agg(["count", "sum"])
        .sort_values("sum", ascending=False)
        .reset_index()
        .rename(columns={"count": "Count", "sum": "Total (ns)"})
    )
    health.details["nsys overhead"] = by_name
    # the measured steps' phases, as every table and finding reads them (a harness run's warm-up left out)
    measured = where.named_ranges(trace, MEASURED)
    phases = overhead_in_phases(trace, over, within=measured)
    placed = "inside the measured steps' phases" if len(measured) else "inside phases"
    total = int(over["duration"].sum())
    top = ", ".join(f"{r['Name']} {r['Total (ns)'] / 1e6:,.1f} ms" for _, r in by_name.head(3).iterrows())
    evidence = f"{len(over):,} events, {total / 1e6:,.1f} ms in all ({top})"
    if phases.empty:
        return Check(name, OK, evidence + "; no NVTX phase ranges to place it in")
    health.details["nsys overhead by phase"] = phases
    inside = "; ".join(
        f"{r['Phase']} {r['Overhead (ns)'] / 1e6:.3f} ms ({r['Share (%)']:.2f}%)"
        for _, r in phases.iterrows()
    )
    worst = phases.loc[phases["Share (%)"].idxmax()]
    if worst["Share (%)"] >= OVERHEAD_WARN_PCT:
        return Check(
            name,
            WARN,
            f"{evidence}; {placed}: {inside}",
            f"nsys's own work is {worst['Share (%)']:.1f}% of {worst['Phase']}: compare phase times "
            "with a run without nsys (`harness overhead`) before trusting them",
        )
    return Check(name, OK, f"{evidence}; {placed}: {inside}")


def overhead_in_phases(
    trace: Trace, over: pd.DataFrame | None = None, within: pd.DataFrame | None = None
) -> pd.DataFrame:
    """nsys's overhead inside each NVTX phase range (forward, backward, optimizer, ...) of the same process:
    Phase, Ranges, Phase time (ns), Overhead (ns), Share (%). Overhead events that overlap count once.
    `within` (start, end, pid: the harness's `measured` ranges): a process that has one counts only the
    phase ranges inside it (its warm-up left out, as every finding leaves it out)."""
    if not trace.has("nvtx"):
        return pd.DataFrame(columns=["Phase", "Ranges", "Phase time (ns)", "Overhead (ns)", "Share (%)"])
    if over is None:
        over = trace.frame("overhead", ["start", "end", "global_tid"])
    ranges = trace.frame("nvtx", ["start", "end", "global_tid", "name"])
    phase_rows = label_in(ranges["name"], ALL_PHASES)  # the names matched once each, not once per range
    ranges = ranges[phase_rows].assign(name=labels_of(ranges["name"], phase_rows))
    if within is not None and len(within):
        pids = ranges["global_tid"].to_numpy() & PROCESS_MASK
        ranges = ranges[where.in_measured(pids, ranges["start"].to_numpy(), ranges["end"].to_numpy(), within)]
    rows = []
    for phase, rs in ranges.groupby("name", sort=False):
        inside = 0
        for pid, prs in rs.groupby(rs["global_tid"].to_numpy() & PROCESS_MASK):
            po = over[(over["global_tid"].to_numpy() & PROCESS_MASK) == pid]
            us, ue = merge(po["start"].to_numpy(), po["end"].to_numpy())
            inside += int(clipped_sums(us, ue, prs["start"].to_numpy(), prs["end"].to_numpy()).sum())
        span = int((rs["end"] - rs["start"]).sum())
        rows.append((phase, len(rs), span, inside, 100 * inside / span if span else 0.0))
    out = pd.DataFrame(rows, columns=["Phase", "Ranges", "Phase time (ns)", "Overhead (ns)", "Share (%)"])
    order = {p: i for i, p in enumerate(ALL_PHASES)}
    return out.sort_values("Phase", key=lambda s: s.map(order)).reset_index(drop=True)


EVENT_FRAMES = ("kernels", "memcpy", "memset", "runtime", "osrt", "nvtx")


def _capture_started(trace: Trace, capture_range: str | None) -> Check:
    """An export with no event at all: a capture range (--capture-range=cudaProfilerApi or nvtx) that
    never started, or one that started after the work ended; without a range, a program that made no call
    of what was traced; nsys still writes the process list. What to do is what applies to `capture_range`
    (capture_health's)."""
    name = "capture"
    counts = {f: trace.count(f) for f in EVENT_FRAMES if trace.has(f)}
    total = sum(counts.values())
    if total:
        said = ", ".join(f"{n:,} {f}" for f, n in counts.items() if n)
        return Check(name, OK, f"{total:,} events recorded ({said})")
    return Check(
        name,
        FAIL,
        "no event recorded after the capture started (no kernel, CUDA call, OS runtime call or NVTX event)",
        _not_started_fix(capture_range),
    )


NO_RANGE_FIX = (
    "the capture ran from the program's start (no capture range), so the program made no call of what nsys "
    "traced: trace what it does (--trace; osrt for its OS calls), or check that it did its work"
)
CUDA_RANGE_FIX = "the program must call cudaProfilerStart (torch.cuda.profiler.start()), before its work ends"
NVTX_RANGE_FIX = (
    "the range named by --nvtx-capture must be pushed (and, for a name not registered, "
    "NSYS_NVTX_PROFILER_REGISTER_ONLY=0 set), before the work ends"
)


def _not_started_fix(capture_range: str | None) -> str:
    """What to do about a capture that recorded nothing, for the capture range it was made with."""
    if capture_range is None:
        return NO_RANGE_FIX
    if capture_range == NOT_KNOWN:
        return (
            f"with --capture-range=cudaProfilerApi {CUDA_RANGE_FIX}; with --capture-range=nvtx "
            f"{NVTX_RANGE_FIX}; without a capture range, the program made no call of what nsys traced "
            "(--trace; osrt for its OS calls)"
        )
    if "cudaprofilerapi" in capture_range.lower():
        return f"with {capture_range} {CUDA_RANGE_FIX}"
    if "nvtx" in capture_range.lower() or "measured" in capture_range:
        return f"with {capture_range} {NVTX_RANGE_FIX}"
    return f"the capture range ({capture_range}) never started, or started after the work"


def _cuda_without_kernels(trace: Trace) -> Check:
    name = "CUDA kernels"
    calls, kernels = trace.count("runtime"), trace.count("kernels")
    if kernels:
        return Check(name, OK, f"{counted(kernels, 'kernel')} from {counted(calls, 'CUDA API call')}")
    if not calls:
        return Check(name, OK, "CUDA not traced (no CUDA API calls)")
    copies = trace.count("memcpy") + trace.count("memset")
    return Check(
        name,
        WARN,
        f"{counted(calls, 'CUDA API call')} and {counted(copies, 'copy or set', 'copies or sets')}, but no "
        "kernels",
        "the traced process launched no kernels: check that the work ran on the GPU and inside the "
        "capture (a capture range that starts too late records only setup)",
    )


def _nvtx_without_ranges(trace: Trace, facts: dict[str, int | bool]) -> Check:
    name = "NVTX ranges"
    if not facts["nvtx_table"]:
        return Check(name, OK, "NVTX not traced (no NVTX_EVENTS table)")
    events, ranges = int(facts["nvtx_events"]), int(facts["nvtx_ranges"])
    if ranges:
        return Check(name, OK, f"{ranges:,} ranges ({events:,} NVTX events)")
    if events:
        return Check(
            name,
            FAIL,
            f"{events:,} NVTX events but no ranges",
            "python `nvtx` 0.2.12 and newer with nsys 2022.4 records no ranges: pin nvtx==0.2.11 or "
            "use a newer nsys",
        )
    return Check(
        name,
        WARN,
        "NVTX traced but no events",
        "the program emitted no NVTX ranges: wrap its phases in nvtx ranges (harness runs do)",
    )


def _open_ranges(facts: dict[str, int | bool], stop: Stop | None = None) -> Check:
    n = int(facts["open_ranges"])
    if not n and not facts["nvtx_ranges"]:  # nothing to say of ranges the export does not hold
        return Check("open ranges", OK, "no NVTX ranges")
    if not n:
        return Check("open ranges", OK, "every NVTX range ends inside the capture")
    said = f"{n:,} NVTX range{'s never end' if n != 1 else ' never ends'} "
    said += "(their time runs to the capture's end)"
    if stop is not None:
        return Check(
            "open ranges",
            WARN,
            f"{said}: {'they were' if n != 1 else 'it was'} open when {stop.said()}",
            f"the run was stopped: run again to measure all {stop.planned} steps",
        )
    return Check("open ranges", WARN, said, "pop every range before the program exits or the capture stops")


# --- both formats -------------------------------------------------------------------------------------


def _times(trace: Trace) -> Check:
    """Rows without a start or end, ending before they start, or starting before the capture's zero; and,
    in an nsys export, events that end after the capture's end (ANALYSIS_DETAILS.duration): nsys ends every
    event inside its capture (a range still open at its end ends there), so an export holding such events
    disagrees with itself (damaged, or edited by hand) and its times cannot be trusted. Read from the start
    and end columns the check reads anyway: no further frame is loaded."""
    name = "times"
    found = []
    capture_end = trace.meta.get("capture_end_ns")
    past: list[tuple[str, int, int, int]] = []  # kind, events, and the latest one's end and start
    for frame in TIMED_CHECKED:
        if not trace.has(frame):
            continue
        start, end = trace.column(frame, "start", keep=False), trace.column(frame, "end", keep=False)
        missing = int(((start == NULL) | (end == NULL)).sum())
        reversed_ = int(((start != NULL) & (end != NULL) & (end < start)).sum())
        negative = int(((start != NULL) & (start < 0)).sum())
        if missing or reversed_ or negative:
            found.append((NAMES_OF[frame], missing, reversed_, negative))
        if isinstance(capture_end, int):
            last = np.maximum(start, end)  # NULL is below every time: a row without an end counts its start
            beyond = last > capture_end
            if beyond.any():
                i = int(np.argmax(last))
                past.append((NAMES_OF[frame], int(beyond.sum()), int(last[i]), int(start[i])))
    text = "; ".join(
        f"{what}: {m:,} without start or end, {r:,} ending before they start, {n:,} negative"
        for what, m, r, n in found
    )
    if past:
        text = "; ".join(filter(None, [_past_the_end(past, capture_end), text]))
        return Check(
            name,
            FAIL,
            text,
            "the export's times disagree with its own capture span: a damaged or edited export, whose "
            "times and sums cannot be trusted: export the report again",
        )
    if not found:
        said = "every start and end is there, and no end comes before its start"
        if trace.format == "nsys-sqlite" and not isinstance(capture_end, int):
            said += (
                "; the export records no capture span (no ANALYSIS_DETAILS): its events are held to the "
                "host's instead (`host events in the trace's span`, `GPU work in the trace's span`)"
            )
        elif isinstance(capture_end, int):
            said += f"; none ends after the capture's end at {capture_end / 1e6:,.3f} ms"
        return Check(name, OK, said)
    bad = any(m or r for _, m, r, _ in found)
    return Check(
        name,
        FAIL if bad else WARN,
        text,
        "these rows are left out of every table; a broken export: export the report again"
        if bad
        else "times before the capture's zero: events from before the session started",
    )


def _past_the_end(past: list[tuple[str, int, int, int]], capture_end: int) -> str:
    """How many events of which kinds end after the capture's end, and the latest of them."""
    events = sum(n for _, n, _, _ in past)
    kinds = ", ".join(f"{what}: {n:,}" for what, n, _, _ in past)
    what, _, end, start = max(past, key=lambda p: p[2])
    began = f"starts at {start / 1e6:,.3f} ms and " if start != NULL else ""
    return (
        f"{counted(events, 'event')} {'ends' if events == 1 else 'end'} after the capture's end at "
        f"{capture_end / 1e6:,.3f} ms ({kinds}); the latest, one of the {what}, {began}ends at "
        f"{end / 1e6:,.3f} ms, {(end - capture_end) / 1e6:,.3f} ms past it"
    )
