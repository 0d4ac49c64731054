"""What the harness itself does inside a run, found in its capture, so that no finding blames the user for it.

The harness times each phase with a clock (harness/execution/timing.py, PhaseClock) that synchronises the
device just before the phase's NVTX range opens and again just before it closes, so its synchronisations sit
at the edges of its own phase ranges: on the range's thread, `cudaDeviceSynchronize` (torch.cuda.synchronize)
is the last CUDA call before the range opens, and the last call inside it before it closes. That holds for
every capture the harness made, older ones too, and needs nothing but the ranges and the calls. A process
whose phase ranges have such a synchronisation at both edges (at least half of them: a range lost by the
profiler must not hide the rest) is timed by a phase clock; its edge synchronisations are the clock's.

What the synchronisations cost the run is not the time the host waits in them (that is the GPU finishing
work already queued) but the GPU idle they cause: the queue is empty when one returns, and stays so until
the host launches again. Without the synchronisation the work it waited for would still have been queued,
keeping the GPU busy while the host went on, so the idle it causes is at most that wait: from each one's
return to the next GPU work of its process (within the step it is in), no longer than its own duration.
That idle is the harness's, and left out of the GPU-idle findings; the rest of such a gap is the host's own
slowness to launch, the user's.

Between two of its steps the harness records the step just done (its timers, the per-step log line, a
profiler's step hook): on a process the harness ran (its `measured` range, a phase clock, or any process
with steps of a capture stored with the run's timers), the time
between consecutive `step` ranges is the harness's, not a user's gap. Threads the harness starts beside the
run (the power sampler, `harness-power`) are the harness's too. NVTX ranges (record_function ranges in a
torch.profiler trace) and in-process timers add no call a finding counts; they are counted here, not left
out of anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis.advice.where import calls, has_gpu, ms, named_ranges, ranges, steps_of
from analysis.hta.gpu_events import gpu_events
from analysis.intervals import clipped_sums
from analysis.readers.global_ids import PROCESS_MASK, pid_of
from analysis.readers.kineto import FORMAT as KINETO
from analysis.trace.trace import Trace
from workloads.names import MEASURED, TOKEN, counted

CLOCK_SYNC = "cudaDeviceSynchronize"  # torch.cuda.synchronize(): what the phase clock calls at each edge
HARNESS_THREADS = ("harness-power",)  # threads the harness starts beside the run (harness.energy.power)
SIGNATURE_SHARE = 0.5  # of a process's phase ranges with the clock's synchronisation at both edges


@dataclass
class Instruments:
    """The harness's own work in a capture (all frames empty when the capture is not of a harness run)."""

    syncs: pd.DataFrame  # the phase clock's synchronisations: start, end, global_tid, pid, edge (open/close)
    idle: pd.DataFrame  # the GPU idle each leaves: start, end, pid
    between: pd.DataFrame  # the harness's time between its steps: start, end, pid
    harness_pids: set[int] = field(default_factory=set)  # processes the harness ran (and timed)
    threads: dict[int, str] = field(default_factory=dict)  # global_tid -> name of the harness's own threads
    nvtx_ranges: int = 0  # the harness's step, phase and token ranges
    range_kind: str = "NVTX range"  # a torch.profiler trace's are record_function ranges

    @property
    def sync_ns(self) -> int:
        return int((self.syncs["end"] - self.syncs["start"]).sum())

    @property
    def idle_ns(self) -> int:
        return int((self.idle["end"] - self.idle["start"]).sum())

    @property
    def between_ns(self) -> int:
        return int((self.between["end"] - self.between["start"]).sum())

    def any(self) -> bool:
        return bool(self.harness_pids) or bool(self.threads)

    def is_sync(self, frame: pd.DataFrame) -> np.ndarray:
        """Which calls of `frame` (start, global_tid) are the phase clock's synchronisations."""
        if self.syncs.empty or frame.empty:
            return np.zeros(len(frame), dtype=bool)
        keys = set(zip(self.syncs["start"].tolist(), self.syncs["global_tid"].tolist(), strict=True))
        return np.array(
            [k in keys for k in zip(frame["start"].tolist(), frame["global_tid"].tolist(), strict=True)],
            dtype=bool,
        )

    def overlap(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Per interval [starts[i], ends[i]): the time of it that is the harness's (the GPU idle its
        synchronisations leave, and its time between steps)."""
        after_syncs, between = self.overlap_parts(starts, ends)
        return after_syncs + between

    def overlap_parts(self, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`overlap` in its two parts: after the synchronisations, and between the steps (disjoint: the
        idle after a synchronisation is cut at the end of its step)."""
        return tuple(  # type: ignore[return-value]
            clipped_sums(spans["start"].to_numpy(), spans["end"].to_numpy(), starts, ends)
            if len(spans) and len(starts)
            else np.zeros(len(starts), dtype=np.int64)
            for spans in (self.idle, self.between)
        )

    def data(self) -> dict[str, Any]:
        """What the harness's instruments did in the capture, as data (`advise --format json`)."""
        return {
            "harness processes": sorted(int(pid_of(p)) for p in self.harness_pids),
            "synchronisations": len(self.syncs),
            "synchronisation calls (ns)": self.sync_ns,
            "GPU idle caused (ns)": self.idle_ns,
            "gaps between steps": len(self.between),
            "between steps (ns)": self.between_ns,
            "NVTX ranges": self.nvtx_ranges,
            "threads": sorted(set(self.threads.values())),
        }

    def line(self) -> str | None:
        """`harness instruments: …`, said once, apart from the findings; None when the capture holds none."""
        if not self.any():
            return None
        parts = []
        if len(self.syncs):
            parts.append(
                f"{counted(len(self.syncs), 'synchronisation')} at its phases' edges, "
                f"{ms(self.idle_ns)} of GPU idle caused (at most the queued work each waited for: "
                f"{ms(self.sync_ns)} in all)"
            )
        if len(self.between):
            parts.append(f"{counted(len(self.between), 'gap')} between its steps, {ms(self.between_ns)}")
        if self.nvtx_ranges:
            parts.append(counted(self.nvtx_ranges, self.range_kind))
        if self.threads:
            parts.append(f"its threads {', '.join(sorted(set(self.threads.values())))}")
        return "harness instruments: " + "; ".join(parts) + "; left out of every finding"


def _empty(*columns: str) -> pd.DataFrame:
    return pd.DataFrame({c: np.empty(0, np.int64) for c in columns})


def instruments(trace: Trace, timed: bool = False) -> Instruments:
    """The harness's instruments in `trace` (module docstring). `timed`: the capture is of a run the harness
    timed (its record holds the run's steps), so every process with step ranges is the harness's, where
    nothing in the capture says so (torch.profiler's trace of a CPU run: no `measured` range, no
    synchronisation)."""
    rs = ranges(trace)
    measured = named_ranges(trace, MEASURED)
    syncs = _clock_syncs(trace, rs)
    pids = set(measured["pid"].tolist()) | set(syncs["pid"].tolist())
    if timed:
        pids |= set(steps_of(rs)["pid"].tolist())
    threads = {}
    if trace.has("threads"):
        names = trace.frame("threads", ["global_tid", "name"])
        threads = {
            int(t): str(n)
            for t, n in zip(names["global_tid"], names["name"], strict=True)
            if str(n) in HARNESS_THREADS
        }
    steps = steps_of(rs)
    between = _between_steps(steps[steps["pid"].isin(pids)])
    idle = _idle_after(trace, syncs, steps)
    harness_ranges = rs[rs["pid"].isin(pids)]
    tokens = named_ranges(trace, TOKEN)  # generate's, one a decoded token inside `decode`
    counted_ranges = len(harness_ranges) + len(measured) + int(tokens["pid"].isin(pids).sum())
    kind = "record_function range" if trace.format == KINETO else "NVTX range"
    return Instruments(syncs, idle, between, pids, threads, counted_ranges, kind)


def _clock_syncs(trace: Trace, rs: pd.DataFrame) -> pd.DataFrame:
    """The phase clock's synchronisations: per phase range, the last CUDA call on its thread before it
    opens and the last inside it, where each is `cudaDeviceSynchronize`; kept for the processes where at
    least SIGNATURE_SHARE of the phase ranges have both."""
    out = _empty("start", "end", "global_tid", "pid").assign(edge=np.empty(0, object))
    phases = rs[rs["phase"].notna()]
    cs = calls(trace)
    if phases.empty or cs.empty:
        return out
    found, both = [], {}
    for tid, on in cs.groupby("global_tid", sort=False):
        mine = phases[phases["tid"] == tid]
        if mine.empty:
            continue
        on = on.sort_values("end", kind="stable")
        ends = on["end"].to_numpy()
        starts, names = on["start"].to_numpy(), on["name"].to_numpy()
        opened = np.searchsorted(ends, mine["start"].to_numpy(), side="right") - 1
        closed = np.searchsorted(ends, mine["end"].to_numpy(), side="right") - 1
        for (start, pid), i, j in zip(
            zip(mine["start"], mine["pid"], strict=True), opened, closed, strict=True
        ):
            at_open = i >= 0 and names[i] == CLOCK_SYNC
            at_close = j >= 0 and names[j] == CLOCK_SYNC and starts[j] >= start
            if at_open:
                found.append((starts[i], ends[i], tid, pid, "open"))
            if at_close:
                found.append((starts[j], ends[j], tid, pid, "close"))
            n, k = both.get(pid, (0, 0))
            both[pid] = (n + 1, k + int(at_open and at_close))
    clocked = {pid for pid, (n, k) in both.items() if n and k >= SIGNATURE_SHARE * n}
    rows = pd.DataFrame(found, columns=["start", "end", "global_tid", "pid", "edge"])
    rows = rows[rows["pid"].isin(clocked)].drop_duplicates(["start", "global_tid"])
    return rows.astype({"start": np.int64, "end": np.int64, "global_tid": np.int64, "pid": np.int64})


def _between_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The time between consecutive step ranges of each process."""
    parts = []
    for pid, ps in steps.sort_values(["pid", "start"]).groupby("pid"):
        ends, starts = ps["end"].to_numpy()[:-1], ps["start"].to_numpy()[1:]
        keep = starts > ends
        parts.append(pd.DataFrame({"start": ends[keep], "end": starts[keep], "pid": pid}))
    return pd.concat(parts, ignore_index=True) if parts else _empty("start", "end", "pid")


def _idle_after(trace: Trace, syncs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per synchronisation: from its return to the next GPU work of its process, no longer than the
    synchronisation's own wait and cut at the end of the step it is in (nothing where GPU work still runs
    at its return, or it is in no step)."""
    if syncs.empty or not has_gpu(trace):
        return _empty("start", "end", "pid")
    ev = gpu_events(trace)
    ev = ev[ev["kind"] != "sync"]
    rows = []
    waited = dict(zip(syncs["end"].tolist(), (syncs["end"] - syncs["start"]).tolist(), strict=True))
    for pid, mine in syncs.groupby("pid"):
        work = ev[(ev["global_pid"].to_numpy() & PROCESS_MASK) == pid]
        order = np.argsort(work["start"].to_numpy(), kind="stable")
        w_start = work["start"].to_numpy()[order]
        w_end = np.maximum.accumulate(work["end"].to_numpy()[order]) if len(order) else w_start
        own = steps[steps["pid"] == pid]
        at = mine["end"].to_numpy()
        # the latest end among the steps it is in: of the steps started by `at`, the latest end, where that
        # is after `at` (that step holds it, and none holding it ends later)
        by_start = np.argsort(own["start"].to_numpy(), kind="stable")
        latest = np.maximum.accumulate(own["end"].to_numpy()[by_start]) if len(own) else np.empty(0, np.int64)
        started = np.searchsorted(own["start"].to_numpy()[by_start], at, side="right")
        step_end = np.where(started > 0, latest[np.maximum(started - 1, 0)] if len(own) else 0, 0)
        k = np.searchsorted(w_start, at, side="right")
        running = (k > 0) & (w_end[np.maximum(k - 1, 0)] > at if len(w_end) else False)
        nxt = np.where(k < len(w_start), w_start[np.minimum(k, len(w_start) - 1)] if len(w_start) else at, at)
        wait = np.array([waited[a] for a in at.tolist()], dtype=np.int64)
        end = np.minimum(np.minimum(nxt, step_end), at + wait)
        keep = (started > 0) & (step_end > at) & ~running & (end > at)
        rows += zip(at[keep].tolist(), end[keep].tolist(), [int(pid)] * int(keep.sum()), strict=True)
    return pd.DataFrame(rows, columns=["start", "end", "pid"]) if rows else _empty("start", "end", "pid")
