"""Advice: findings ranked by the time at stake, each with its evidence, where it happened (phase, steps) and
the fix in plain words. docs/advice.md lists every rule with its source, its threshold and why.

The time at stake is an upper bound on what fixing the finding can save, never an estimate of it: the GPU
time lost waiting for the host, the host time blocked in synchronising calls, a phase's time the GPU spent
idle. Rules build on the tables that exist (HTA's idle-time categories from analysis.hta.breakdown, the GPU
events of analysis.hta.gpu_events) instead of computing them again.

Phases are the NVTX ranges the harness records (forward, backward, optimizer, prefill, decode, allreduce;
in Kineto traces record_function ranges such as `## forward ##` count too) and any range nested directly
in a `step` range (a program's own phases), steps are `step` NVTX ranges or
Kineto's `ProfilerStep#N`. A finding is placed by the time its evidence happened, in the ranges of the same
process (GPU time against CPU ranges: the GPU lags the host, so placement is by when the host was there).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

import numpy as np
import pandas as pd

from analysis.advice.health import overhead_in_phases
from analysis.errors import AnalysisError
from analysis.hta.breakdown import LAUNCH_CALLS, idle_intervals, idle_time_breakdown
from analysis.hta.gpu_events import COMPUTATION, gpu_events, merge, sweep, types_of
from analysis.joins.nvtx_ranges import step_phases
from analysis.joins.runtime import plain_name
from analysis.readers.kineto_build import STEP_RE
from analysis.trace.trace import Trace
from workloads.names import ALLREDUCE, GENERATE_PHASES, STEP, TRAIN_PHASES

PHASES = (*TRAIN_PHASES, ALLREDUCE, *GENERATE_PHASES)
PROCESS = ~0xFFFFFF
COLUMNS = ["Rule", "Time at stake (ns)", "Where", "Evidence", "Fix"]
LOADER = r"enumerate\(DataLoader\)"  # torch.profiler's range around each next(iter(loader))
SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy")


@dataclass(frozen=True)
class Thresholds:
    """When each rule fires (docs/advice.md says why these defaults)."""

    host_wait_share: float = 0.10  # host-wait idle of the busiest stream, share of the GPU's span
    syncs_per_step: float = 1.0  # blocking synchronisations per step, on average
    launch_busy_below: float = 0.50  # launch-bound: GPU busy below this share of the phase ...
    launch_share_above: float = 0.30  # ... while launch calls take at least this share of it
    optimizer_kernels: int = 50  # optimizer: kernels per optimizer step from this many ...
    optimizer_median_ns: int = 20_000  # ... with a median kernel shorter than this
    overhead_share: float = 0.02  # nsys's own time inside a phase, share of the phase (health's threshold)
    data_loading_share: float = 0.05  # GPU idle while loading data / between steps, share of the steps' time
    exposed_comm_share: float = 0.10  # communication kernels with no computation beside, share of GPU span

    def with_options(self, options: list[str]) -> Thresholds:
        """These thresholds with `NAME=VALUE` options applied; AnalysisError naming what is wrong."""
        types = {f.name: type(getattr(self, f.name)) for f in fields(self)}
        changed = {}
        for opt in options:
            key, eq, value = opt.partition("=")
            if key not in types or not eq:
                raise AnalysisError(f"threshold {opt!r}: use NAME=VALUE, NAME one of {', '.join(types)}")
            try:
                changed[key] = types[key](value)
            except ValueError:
                raise AnalysisError(f"threshold {key} takes a {types[key].__name__}, not {value!r}") from None
        return replace(self, **changed)

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in asdict(self).items())


@dataclass
class Finding:
    rule: str
    at_stake_ns: int
    where: str
    evidence: str
    fix: str
    table: pd.DataFrame | None = field(default=None, repr=False)


def findings(trace: Trace, thresholds: Thresholds | None = None) -> list[Finding]:
    """Every rule that fires on `trace`, largest time at stake first."""
    th = thresholds or Thresholds()
    found: list[Finding] = []
    rules = (
        host_wait,
        syncs_in_steps,
        launch_bound,
        optimizer_small_kernels,
        data_loading,
        exposed_communication,
        nsys_overhead_in_phases,
    )
    for rule in rules:
        found += rule(trace, th)
    return sorted(found, key=lambda f: -f.at_stake_ns)


def findings_table(found: list[Finding]) -> pd.DataFrame:
    out = pd.DataFrame(
        [(f.rule, f.at_stake_ns, f.where, f.evidence, f.fix) for f in found], columns=COLUMNS
    ).astype({"Time at stake (ns)": np.int64})
    out.attrs["priority"] = ["Rule", "Time at stake (ns)", "Where", "Fix", "Evidence"]
    return out


# --- where: phases and steps ---------------------------------------------------------------------------


def phase_of(name: str) -> str | None:
    """The phase a range names: `forward`, or Kineto's `## forward ##`; None for other ranges."""
    plain = name.strip("# ").lower()
    return plain if plain in PHASES else None


def _ranges(trace: Trace) -> pd.DataFrame:
    """Phase and step ranges: start, end, pid, phase (or None), step (or -1)."""
    if not trace.has("nvtx"):  # typed: a float is_step would select columns, not rows
        i64 = np.empty(0, np.int64)
        return pd.DataFrame(
            {"start": i64, "end": i64, "pid": i64, "phase": np.empty(0, object), "step": i64,
             "is_step": np.empty(0, bool)}
        )  # fmt: skip
    nv = trace.frame("nvtx", ["start", "end", "global_tid", "name", "payload"])
    names = nv["name"].astype(str)
    phase = names.map(phase_of)
    own = step_phases(trace)  # the export's own phases (a program's names too): the ranges inside `step`s
    phase = phase.where(~names.isin(own), names)
    kineto_step = names.str.extract(STEP_RE.pattern, expand=False)
    step = np.where(kineto_step.notna(), kineto_step.fillna("-1").astype(np.int64), -1)
    harness_step = (names == STEP).to_numpy()
    step = np.where(harness_step, nv["payload"].fillna(-1).to_numpy(dtype=np.int64), step)
    is_step = harness_step | kineto_step.notna().to_numpy()
    keep = phase.notna().to_numpy() | is_step
    return pd.DataFrame(
        {
            "start": nv["start"].to_numpy()[keep],
            "end": nv["end"].to_numpy()[keep],
            "pid": (nv["global_tid"].to_numpy() & PROCESS)[keep],
            "phase": phase.to_numpy()[keep],
            "step": np.where(is_step, step, -1)[keep],
            "is_step": is_step[keep],
        }
    )


def place(
    ranges: pd.DataFrame, times: np.ndarray, weights: np.ndarray, pids: np.ndarray | None = None
) -> str:
    """Where events at `times` (of processes `pids`, any when None) happened: their weight by phase, as
    shares, and the steps they fall in."""
    times, weights = np.asarray(times), np.asarray(weights, dtype=np.float64)
    total = float(weights.sum())
    if not len(times) or total <= 0:
        return "whole capture"
    parts = []
    phases = ranges[ranges["phase"].notna()]
    for phase, rs in phases.groupby("phase", sort=False):
        inside = _inside(rs, times, pids)
        share = float(weights[inside].sum()) / total
        if share >= 0.005:
            parts.append((share, f"{phase} {100 * share:.0f}%"))
    text = ", ".join(p for _, p in sorted(parts, reverse=True)) or "outside phases"
    steps = ranges[ranges["is_step"]]
    if len(steps):
        hit = [int(s) for s, rs in steps.groupby("step") if _inside(rs, times, pids).any() and s >= 0]
        if hit:
            text += f"; steps {hit[0]}–{hit[-1]}" if len(hit) > 1 else f"; step {hit[0]}"
    return text


def _inside(rs: pd.DataFrame, times: np.ndarray, pids: np.ndarray | None) -> np.ndarray:
    inside = np.zeros(len(times), dtype=bool)
    for s, e, p in zip(rs["start"], rs["end"], rs["pid"], strict=True):
        hit = (times >= s) & (times < e)
        inside |= hit if pids is None else hit & (pids == p)
    return inside


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


# --- rules ---------------------------------------------------------------------------------------------


def host_wait(trace: Trace, th: Thresholds) -> list[Finding]:
    """The GPU waits for the host: HTA's host-wait idle time on the busiest stream (analysis.hta.breakdown's
    idle_time_breakdown, equal to HTA's on its fixtures)."""
    if not any(trace.has(f) for f in ("kernels", "memcpy", "memset")):
        return []
    ev = gpu_events(trace)
    ev = ev[ev["kind"] != "sync"]
    busy = (ev["end"] - ev["start"]).groupby(ev["stream"]).sum()
    stream = int(busy.idxmax())
    span = int(ev["end"].max() - ev["start"].min())
    idle = idle_time_breakdown(trace)
    mine = idle[idle["Stream"] == stream].set_index("Idle Category")["Idle Time (ns)"]
    waited = int(mine.get("host_wait", 0))
    if not span or waited < th.host_wait_share * span:
        return []
    gaps = idle_intervals(trace)
    gaps = gaps[(gaps["Stream"] == stream) & (gaps["category"] == "host_wait")]
    prev_end = (gaps["start"] - gaps["gap"]).to_numpy(dtype=np.int64)
    split = ", ".join(f"{c.replace('_', '-')} {_ms(v)}" for c, v in mine.items())
    evidence = (
        f"stream {stream} (the busiest: {_ms(busy.max())} of GPU work in a {_ms(span)} span) idles {split}; "
        f"{len(gaps):,} gaps wait for the host to launch (HTA's idle categories)"
    )
    fix = (
        "the host launches too late: find the CPU work before the gaps (Python, data loading, "
        "synchronisations), overlap it with the GPU, batch more per launch or fuse operators"
    )
    return [
        Finding(
            "gpu-host-wait",
            waited,
            place(_ranges(trace), prev_end, gaps["gap"].to_numpy()),
            evidence,
            fix,
            idle,
        )
    ]


def _calls(trace: Trace) -> pd.DataFrame:
    calls = trace.frame("runtime", ["start", "end", "correlation_id", "global_tid", "name_id"])
    names = {i: plain_name(n) for i, n in trace.strings(calls["name_id"].unique()).items()}
    return calls.assign(name=calls["name_id"].map(names), pid=calls["global_tid"].to_numpy() & PROCESS)


def syncs_in_steps(trace: Trace, th: Thresholds) -> list[Finding]:
    """Blocking synchronisations (device, stream or event synchronize, a synchronous copy) inside steps."""
    ranges = _ranges(trace)
    steps = ranges[ranges["is_step"]]
    if steps.empty or not trace.has("runtime"):
        return []
    calls = _calls(trace)
    calls = calls[calls["name"].isin(SYNC_CALLS)]
    inside = _inside(steps, calls["start"].to_numpy(), calls["pid"].to_numpy())
    calls = calls[inside]
    if len(calls) < th.syncs_per_step * len(steps) or calls.empty:
        return []
    dur = (calls["end"] - calls["start"]).to_numpy()
    kinds = ", ".join(f"{n:,} {k}" for k, n in calls["name"].value_counts().items())
    evidence = (
        f"{len(calls):,} blocking calls in {len(steps)} steps ({kinds}): the host waits {_ms(dur.sum())} "
        f"in all, longest {_ms(dur.max())}; each drains the GPU's queue"
    )
    fix = (
        "remove synchronisations from the step: no .item(), print or .cpu() of a tensor inside it; copy to "
        "the host with non_blocking=True into pinned memory and read it a step later"
    )
    where = place(ranges, calls["start"].to_numpy(), dur, calls["pid"].to_numpy())
    return [Finding("sync-in-step", int(dur.sum()), where, evidence, fix)]


def _busy_within(us: np.ndarray, ue: np.ndarray, start: int, end: int) -> int:
    return int((np.clip(ue, start, end) - np.clip(us, start, end)).sum())


def _phase_table(trace: Trace) -> pd.DataFrame:
    """Per phase range: phase, start, end, pid, GPU busy (union of all GPU work inside the range's time),
    launch calls (count, time) and kernels launched inside it (count, median duration)."""
    ranges = _ranges(trace)
    phases = ranges[ranges["phase"].notna()]
    if phases.empty or not any(trace.has(f) for f in ("kernels", "memcpy", "memset")):
        return pd.DataFrame()
    ev = gpu_events(trace)
    ev = ev[ev["kind"] != "sync"]
    us, ue = merge(ev["start"].to_numpy(), ev["end"].to_numpy())
    calls = _calls(trace) if trace.has("runtime") else pd.DataFrame(columns=["start", "end", "name", "pid"])
    launches = calls[calls["name"].isin(LAUNCH_CALLS)]
    kernels = ev[ev["kind"] == "kernel"]
    joined = kernels.assign(pid=kernels["global_pid"].to_numpy() & PROCESS).merge(
        launches[["correlation_id", "pid", "start"]].rename(columns={"start": "launch"}),
        on=["pid", "correlation_id"],
    )
    rows = []
    for r in phases.itertuples(index=False):
        lc = launches[
            (launches["pid"] == r.pid) & (launches["start"] >= r.start) & (launches["start"] < r.end)
        ]
        ks = joined[(joined["pid"] == r.pid) & (joined["launch"] >= r.start) & (joined["launch"] < r.end)]
        rows.append(
            {
                "phase": r.phase,
                "start": r.start,
                "end": r.end,
                "pid": r.pid,
                "busy": _busy_within(us, ue, r.start, r.end),
                "launches": len(lc),
                "launch_time": int((lc["end"] - lc["start"]).sum()),
                "kernels": len(ks),
                "kernel_median": float(np.median(ks["end"] - ks["start"])) if len(ks) else 0.0,
            }
        )
    return pd.DataFrame(rows)


def launch_bound(trace: Trace, th: Thresholds) -> list[Finding]:
    """Phases where the GPU is mostly idle while the host spends its time launching."""
    table = _phase_table(trace)
    if table.empty:
        return []
    ranges = _ranges(trace)
    out = []
    for phase, t in table.groupby("phase", sort=False):
        wall, busy, launch = (
            int((t["end"] - t["start"]).sum()),
            int(t["busy"].sum()),
            int(t["launch_time"].sum()),
        )
        if not wall or busy >= th.launch_busy_below * wall or launch < th.launch_share_above * wall:
            continue
        evidence = (
            f"{len(t)} {phase} ranges, {_ms(wall)}: GPU busy {_ms(busy)} ({100 * busy / wall:.0f}%), "
            f"{int(t['launches'].sum()):,} launch calls take {_ms(launch)} ({100 * launch / wall:.0f}%) of it"
        )
        fix = (
            "the host cannot launch fast enough: capture the phase in a CUDA graph, or "
            'torch.compile(mode="reduce-overhead"); larger batches give each launch more work'
        )
        where = place(ranges, t["start"].to_numpy(), (t["end"] - t["start"]).to_numpy(), t["pid"].to_numpy())
        out.append(Finding("launch-bound", wall - busy, where, evidence, fix))
    return out


def optimizer_small_kernels(trace: Trace, th: Thresholds) -> list[Finding]:
    """An optimizer step that runs as many small kernels (a loop over parameters, not foreach or fused)."""
    table = _phase_table(trace)
    if table.empty:
        return []
    opt = table[table["phase"] == "optimizer"]
    if opt.empty:
        return []
    per_step = float(opt["kernels"].mean())
    median = float(np.median(opt["kernel_median"]))
    if per_step < th.optimizer_kernels or median >= th.optimizer_median_ns:
        return []
    wall, busy = int((opt["end"] - opt["start"]).sum()), int(opt["busy"].sum())
    evidence = (
        f"{len(opt)} optimizer steps launch {per_step:,.0f} kernels each, median {median / 1000:.1f} µs; "
        f"the steps take {_ms(wall)}, the GPU is busy {_ms(busy)} of it"
    )
    fix = (
        "use the multi-tensor optimizer: torch.optim.AdamW(..., foreach=True) or fused=True (on CUDA), "
        "so each step is a few large kernels instead of several per parameter"
    )
    where = place(
        _ranges(trace), opt["start"].to_numpy(), (opt["end"] - opt["start"]).to_numpy(), opt["pid"].to_numpy()
    )
    return [Finding("optimizer-small-kernels", max(wall - busy, 0), where, evidence, fix)]


def nsys_overhead_in_phases(trace: Trace, th: Thresholds) -> list[Finding]:
    """nsys's own work (PROFILER_OVERHEAD) inside a phase, large enough to change what its time says."""
    if not (trace.has("overhead") and trace.has("nvtx")):
        return []
    table = overhead_in_phases(trace)
    big = table[table["Share (%)"] >= 100 * th.overhead_share]
    if big.empty:
        return []
    inside = int(big["Overhead (ns)"].sum())
    parts = "; ".join(
        f"{r['Phase']}: {_ms(r['Overhead (ns)'])} of {_ms(r['Phase time (ns)'])} ({r['Share (%)']:.1f}%)"
        for _, r in big.iterrows()
    )
    where = ", ".join(f"{r['Phase']} {100 * r['Overhead (ns)'] / inside:.0f}%" for _, r in big.iterrows())
    fix = (
        "the profiler's own time is inside the phase: leave warm-up out of the capture (--nsys-capture "
        "measured) or compare the phase with a run without nsys (`harness overhead`)"
    )
    return [
        Finding(
            "nsys-overhead-in-phase", inside, where, f"nsys's own work inside phases: {parts}", fix, table
        )
    ]


def data_loading(trace: Trace, th: Thresholds) -> list[Finding]:
    """Time spent getting the next batch with the GPU idle: torch.profiler's `enumerate(DataLoader)` ranges
    and the gaps between consecutive steps of a process."""
    ranges = _ranges(trace)
    steps = ranges[ranges["is_step"]].sort_values(["pid", "start"])
    if steps.empty:
        return []
    spans = []
    for pid, ps in steps.groupby("pid"):
        ends, starts = ps["end"].to_numpy()[:-1], ps["start"].to_numpy()[1:]
        keep = starts > ends
        spans.append(
            pd.DataFrame({"start": ends[keep], "end": starts[keep], "pid": pid, "kind": "between steps"})
        )
    nv = trace.frame("nvtx", ["start", "end", "global_tid", "name"])
    loads = nv[nv["name"].astype(str).str.contains(LOADER)]
    spans.append(
        pd.DataFrame(
            {
                "start": loads["start"],
                "end": loads["end"],
                "pid": loads["global_tid"].to_numpy() & PROCESS,
                "kind": "DataLoader",
            }
        )
    )
    spans = pd.concat(spans, ignore_index=True)
    if spans.empty:
        return []
    if any(trace.has(f) for f in ("kernels", "memcpy", "memset")):
        ev = gpu_events(trace)
        us, ue = merge(ev["start"].to_numpy(), ev["end"].to_numpy())
        busy = np.array(
            [_busy_within(us, ue, s, e) for s, e in zip(spans["start"], spans["end"], strict=True)]
        )
    else:
        busy = np.zeros(len(spans), dtype=np.int64)
    idle = (spans["end"] - spans["start"]).to_numpy() - busy
    stake, step_time = int(idle.sum()), int((steps["end"] - steps["start"]).sum())
    if not step_time or stake < th.data_loading_share * step_time:
        return []
    by_kind = "; ".join(
        f"{k}: {int((spans['kind'] == k).sum()):,} spans, {_ms(idle[(spans['kind'] == k).to_numpy()].sum())} "
        "with the GPU idle"
        for k in ("DataLoader", "between steps")
        if (spans["kind"] == k).any()
    )
    evidence = f"{by_kind}; the {len(steps)} steps take {_ms(step_time)}"
    fix = (
        "load the next batch while the GPU works: DataLoader(num_workers=N, pin_memory=True, "
        "persistent_workers=True, prefetch_factor=2) and .to(device, non_blocking=True)"
    )
    where = place(ranges, spans["start"].to_numpy(), idle, spans["pid"].to_numpy())
    return [Finding("data-loading", stake, where, evidence, fix)]


def exposed_communication(trace: Trace, th: Thresholds) -> list[Finding]:
    """Collectives with no computation beside them: the time of communication kernels (HTA's COMMUNICATION
    type) during which no compute kernel runs, the part of analysis.hta.breakdown.comm_comp_overlap that is
    not
    overlapped."""
    if not trace.has("kernels"):
        return []
    ev = gpu_events(trace)
    kind = types_of(ev)
    start, end = ev["start"].to_numpy(), ev["end"].to_numpy()
    comm = merge(start[kind == "COMMUNICATION"], end[kind == "COMMUNICATION"])
    total = int((comm[1] - comm[0]).sum())
    if not total:
        return []
    comp = merge(start[kind == COMPUTATION], end[kind == COMPUTATION])
    state, lo, hi = sweep([comm, comp])
    alone = state == 1  # communication only
    exposed = int((hi - lo)[alone].sum())
    span = int(end.max() - start.min())
    if not span or exposed < th.exposed_comm_share * span:
        return []
    evidence = (
        f"communication kernels run {_ms(total)}, {_ms(exposed)} of it ({100 * exposed / total:.1f}%) "
        f"with no computation beside it, {100 * exposed / span:.1f}% of the GPU's {_ms(span)} span"
    )
    fix = (
        "overlap collectives with compute: DDP bucketing (bucket_cap_mb), gradient all-reduce during "
        "backward, FSDP prefetch (forward_prefetch, backward_prefetch); do not wait on a collective right "
        "after starting it"
    )
    where = place(_ranges(trace), lo[alone], (hi - lo)[alone])
    return [Finding("exposed-communication", exposed, where, evidence, fix)]
