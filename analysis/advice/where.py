"""Where a finding happened, and the frames every rule reads: the phase and step ranges of a capture, the
CUDA calls with their names, the GPU's busy time, the placing of events into phases and steps.

Phases are the NVTX ranges the harness records (forward, backward, optimizer, prefill, decode, allreduce;
in Kineto traces record_function ranges such as `## forward ##` count too) and any range nested directly
in a `step` range (a program's own phases), steps are `step` NVTX ranges or
Kineto's `ProfilerStep#N` (where a trace holds both, as a torch.profiler trace of the harness's run does, the
`step` ranges). An event is placed by the time it happened, in the ranges of the same process (GPU time
against CPU ranges: the GPU lags the host, so placement is by when the host was there).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.hta.gpu_events import gpu_events, merge
from analysis.intervals import clipped_sums, covered, covered_any, in_windows, slices
from analysis.joins.nvtx_ranges import step_phases
from analysis.joins.runtime import plain_name
from analysis.readers.global_ids import PROCESS_MASK
from analysis.readers.kineto_build import STEP_RE
from analysis.trace.frames import GPU_WORK
from analysis.trace.trace import Trace
from workloads.names import ALL_PHASES, STEP

RANGE_COLUMNS = ("start", "end", "pid", "tid", "phase", "step", "is_step")


def phase_of(name: str) -> str | None:
    """The phase a range names: `forward`, or Kineto's `## forward ##`; None for other ranges."""
    plain = name.strip("# ").lower()
    return plain if plain in ALL_PHASES else None


def has_gpu(trace: Trace) -> bool:
    return any(trace.has(f) for f in GPU_WORK)


def ranges(trace: Trace) -> pd.DataFrame:
    """Phase and step ranges: start, end, pid, tid (the range's thread), phase (or None), step (or -1),
    is_step. Where the harness's `step` ranges are there, Kineto's ProfilerStep#N ranges are not steps (the
    same steps, counted twice otherwise)."""
    if not trace.has("nvtx"):  # typed: a float is_step would select columns, not rows
        i64 = np.empty(0, np.int64)
        return pd.DataFrame(
            {
                "start": i64,
                "end": i64,
                "pid": i64,
                "tid": i64,
                "phase": np.empty(0, object),
                "step": i64,
                "is_step": np.empty(0, bool),
            }
        )
    nv = trace.frame("nvtx", ["start", "end", "global_tid", "name", "payload"])
    names = nv["name"].astype(str)
    phase = names.map(phase_of)
    own = step_phases(trace)  # the export's own phases (a program's names too): the ranges inside `step`s
    phase = phase.where(~names.isin(own), names)
    kineto_step = names.str.extract(STEP_RE.pattern, expand=False)
    harness_step = (names == STEP).to_numpy()
    if harness_step.any():
        kineto_step[:] = np.nan
    step = np.where(kineto_step.notna(), kineto_step.fillna("-1").astype(np.int64), -1)
    step = np.where(harness_step, nv["payload"].fillna(-1).to_numpy(dtype=np.int64), step)
    is_step = harness_step | kineto_step.notna().to_numpy()
    keep = phase.notna().to_numpy() | is_step
    tid = nv["global_tid"].to_numpy()
    return pd.DataFrame(
        {
            "start": nv["start"].to_numpy()[keep],
            "end": nv["end"].to_numpy()[keep],
            "pid": (tid & PROCESS_MASK)[keep],
            "tid": tid[keep],
            "phase": phase.to_numpy()[keep],
            "step": np.where(is_step, step, -1)[keep],
            "is_step": is_step[keep],
        }
    )


def named_ranges(trace: Trace, pattern: str) -> pd.DataFrame:
    """NVTX (or record_function) ranges whose name matches the regex `pattern` in full: start, end, pid,
    tid, name."""
    if not trace.has("nvtx"):
        return pd.DataFrame(columns=["start", "end", "pid", "tid", "name"])
    nv = trace.frame("nvtx", ["start", "end", "global_tid", "name"])
    hit = nv[nv["name"].astype(str).str.fullmatch(pattern)]
    tid = hit["global_tid"].to_numpy()
    return pd.DataFrame(
        {
            "start": hit["start"].to_numpy(),
            "end": hit["end"].to_numpy(),
            "pid": tid & PROCESS_MASK,
            "tid": tid,
            "name": hit["name"].astype(str).to_numpy(),
        }
    )


def steps_of(trace_ranges: pd.DataFrame) -> pd.DataFrame:
    return trace_ranges[trace_ranges["is_step"]]


def place(
    trace_ranges: pd.DataFrame, times: np.ndarray, weights: np.ndarray, pids: np.ndarray | None = None
) -> str:
    """Where events at `times` (of processes `pids`, any when None) happened: their weight by phase, as
    shares, and the steps they fall in."""
    times, weights = np.asarray(times), np.asarray(weights, dtype=np.float64)
    total = float(weights.sum())
    if not len(times) or total <= 0:
        return "whole capture"
    parts = []
    phases = trace_ranges[trace_ranges["phase"].notna()]
    for phase, rs in phases.groupby("phase", sort=False):
        hit = inside(rs, times, pids)
        share = float(weights[hit].sum()) / total
        if share >= 0.005:
            parts.append((share, f"{phase} {100 * share:.0f}%"))
    if parts:  # the rest is said too: the shares add up to the whole
        outside = float(weights[~inside(phases, times, pids)].sum()) / total
        if outside >= 0.005:
            parts.append((outside, f"outside phases {100 * outside:.0f}%"))
    text = ", ".join(p for _, p in sorted(parts, reverse=True)) or "outside phases"
    steps = steps_of(trace_ranges)
    if len(steps):
        hit = sorted({int(s) for s in steps["step"].to_numpy()[_holding(steps, times, pids)] if s >= 0})
        if hit:
            text += f"; steps {hit[0]}–{hit[-1]}" if len(hit) > 1 else f"; step {hit[0]}"
    return text


def _holding(rs: pd.DataFrame, times: np.ndarray, pids: np.ndarray | None) -> np.ndarray:
    """Which of the ranges `rs` hold one of `times` (of processes `pids`; any when None)."""
    if pids is None:  # every range and time as of one process
        pids, rs = np.zeros(len(times), dtype=np.int64), rs.assign(pid=0)
    return in_windows(np.asarray(pids), times, {"n": None}, rs)["n"] > 0


def inside(rs: pd.DataFrame, times: np.ndarray, pids: np.ndarray | None = None) -> np.ndarray:
    """Which of `times` (of processes `pids`; any when None) fall in one of the ranges `rs`."""
    times = np.asarray(times)
    spans = zip(rs["start"], rs["end"], rs["pid"], strict=True)
    if pids is None:
        return covered_any(times, [(s, e) for s, e, _ in spans])
    return covered(np.asarray(pids), times, list(spans))


def in_measured(pids: np.ndarray, starts: np.ndarray, ends: np.ndarray, measured: pd.DataFrame) -> np.ndarray:
    """Which ranges (of processes `pids`) to read: those inside their process's `measured` range (start,
    end, pid), and every range of a process without one."""
    keep = ~np.isin(pids, measured["pid"].to_numpy())
    for s, e, pid in zip(measured["start"], measured["end"], measured["pid"], strict=True):
        keep |= (pids == pid) & (starts >= s) & (ends <= e)
    return keep


def ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


def calls(trace: Trace) -> pd.DataFrame:
    """The CUDA runtime and driver calls: start, end, correlation_id, global_tid, name (without a version
    suffix), pid; none when the capture holds none."""
    if not trace.has("runtime"):
        return pd.DataFrame(
            columns=["start", "end", "correlation_id", "global_tid", "name_id", "name", "pid"]
        )
    got = trace.frame("runtime", ["start", "end", "correlation_id", "global_tid", "name_id"])
    names = {i: plain_name(n) for i, n in trace.strings(got["name_id"].unique()).items()}
    return got.assign(name=got["name_id"].map(names), pid=got["global_tid"].to_numpy() & PROCESS_MASK)


def os_calls(trace: Trace) -> pd.DataFrame:
    """The OS runtime calls: start, end, global_tid, name, pid; none when the capture holds none."""
    return named_events(trace, "osrt")


def named_events(trace: Trace, frame: str) -> pd.DataFrame:
    """The events of `frame` (one with a thread and a name: osrt, cpu_ops) as start, end, global_tid, name,
    pid; none when the capture holds none."""
    if not trace.has(frame):
        return pd.DataFrame(columns=["start", "end", "global_tid", "name", "pid"])
    got = trace.frame(frame, ["start", "end", "global_tid", "name_id"])
    names = trace.strings(got["name_id"].unique())
    return pd.DataFrame(
        {
            "start": got["start"].to_numpy(),
            "end": got["end"].to_numpy(),
            "global_tid": got["global_tid"].to_numpy(),
            "name": got["name_id"].map(names).to_numpy(),
            "pid": got["global_tid"].to_numpy() & PROCESS_MASK,
        }
    )


def gpu_work(trace: Trace) -> pd.DataFrame:
    """The trace's kernels, copies and sets (gpu_events less its sync events)."""
    ev = gpu_events(trace)
    return ev[ev["kind"] != "sync"]


def busy_within(ev: pd.DataFrame, starts: np.ndarray, ends: np.ndarray, pids: np.ndarray) -> np.ndarray:
    """Per interval [starts[i], ends[i]) of process pids[i]: the time the GPU work (`ev`, gpu_events) of
    that process was busy in it: another process's GPUs (a second rank in the same capture) do not keep it
    busy. An interval of a process without GPU work of its own (Kineto's annotation lanes) counts all."""
    start, end = ev["start"].to_numpy(), ev["end"].to_numpy()
    busy = clipped_sums(*merge(start, end), starts, ends)
    owners = ev["global_pid"].to_numpy() & PROCESS_MASK
    if len(np.unique(owners)) < 2:
        return busy
    for pid in np.intersect1d(np.unique(pids), owners):
        mine, at = owners == pid, pids == pid
        busy[at] = clipped_sums(*merge(start[mine], end[mine]), starts[at], ends[at])
    return busy


def phase_table(trace: Trace, launch_calls: frozenset[str] | tuple[str, ...]) -> pd.DataFrame:
    """Per phase range: phase, start, end, pid, GPU busy (union of all GPU work inside the range's time),
    launch calls (count, time) and kernels launched inside it (count, median duration)."""
    trace_ranges = ranges(trace)
    phases = trace_ranges[trace_ranges["phase"].notna()]
    if phases.empty or not has_gpu(trace):
        return pd.DataFrame()
    ev = gpu_work(trace)
    cs = calls(trace)
    launches = cs[cs["name"].isin(launch_calls)]
    kernels = ev[ev["kind"] == "kernel"]
    joined = kernels.assign(pid=kernels["global_pid"].to_numpy() & PROCESS_MASK).merge(
        launches[["correlation_id", "pid", "start"]].rename(columns={"start": "launch"}),
        on=["pid", "correlation_id"],
    )
    starts, ends = phases["start"].to_numpy(), phases["end"].to_numpy()
    windows = pd.DataFrame({"pid": phases["pid"].to_numpy(), "start": starts, "end": ends})
    lc = in_windows(
        launches["pid"].to_numpy(), launches["start"].to_numpy(),
        {"n": None, "time": (launches["end"] - launches["start"]).to_numpy()}, windows,
    )  # fmt: skip
    order, lo, hi = slices(joined["pid"].to_numpy(), joined["launch"].to_numpy(), windows)
    took = (joined["end"] - joined["start"]).to_numpy()[order]
    return pd.DataFrame(
        {
            "phase": phases["phase"].to_numpy(),
            "start": starts,
            "end": ends,
            "pid": phases["pid"].to_numpy(),
            "busy": busy_within(ev, starts, ends, phases["pid"].to_numpy()),
            "launches": lc["n"],
            "launch_time": lc["time"],
            "kernels": hi - lo,
            "kernel_median": [
                float(np.median(took[a:b])) if b > a else 0.0 for a, b in zip(lo, hi, strict=True)
            ],
        }
    )
