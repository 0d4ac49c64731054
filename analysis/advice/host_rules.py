"""Rules that read what the host did: synchronisations in the steps, a data loader at work, gaps between
steps, recompiles, and nsys's own time in the phases. None of them counts what the harness itself did
(analysis.advice.instruments): its phase clock's synchronisations, its time between its steps, its threads."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis.advice.base import LOADER_RANGES, LOADER_THREADS, Finding, Seen
from analysis.advice.health import overhead_in_phases
from analysis.advice.where import inside, ms, named_ranges
from analysis.intervals import clipped_sums
from analysis.readers.global_ids import pid_of
from workloads.names import FORWARD, OPTIMIZER, counted

SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy")
ITEM_OPS = ("aten::_local_scalar_dense",)  # a tensor read on the host: .item(), float(t), bool(t), print
OPTIMIZER_STEP = r"Optimizer\.(step|zero_grad)#.*"  # torch's range around an optimizer's step
COMPILE_WAITS = ("waitpid", "wait4", "waitid")  # the host waiting for a compiler it started
TOP = 3


def _named(calls: pd.DataFrame, top: int = TOP) -> list[dict[str, Any]]:
    """The calls' names with their counts and time, the most time first."""
    if calls.empty:
        return []
    per = (calls["end"] - calls["start"]).groupby(calls["name"]).agg(["size", "sum"])
    per = per.sort_values("sum", ascending=False).head(top)
    return [{"name": str(n), "calls": int(r["size"]), "time (ns)": int(r["sum"])} for n, r in per.iterrows()]


def _said(named: list[dict[str, Any]]) -> str:
    return ", ".join(f"{c['name']} ×{c['calls']:,} ({ms(c['time (ns)'])})" for c in named)


def _backtraces(seen: Seen, frame: str, calls: pd.DataFrame, top: int = TOP) -> list[dict[str, Any]]:
    """The recorded backtraces of the longest of `calls` (Python frames where nsys recorded them, else the
    native ones), for the evidence; none where the export has no call chains."""
    reader = seen.trace.reader if seen.trace.format == "nsys-sqlite" else None
    if calls.empty or reader is None or not hasattr(reader, "backtraces"):
        return []
    longest = calls.assign(d=calls["end"] - calls["start"]).nlargest(top, "d")
    keys = list(zip(longest["global_tid"].astype(int), longest["start"].astype(int), strict=True))
    found = reader.backtraces(frame, keys)
    out = []
    for (tid, start), name in zip(keys, longest["name"], strict=True):
        frames = found.get((tid, start))
        if frames:
            python = [f for f in frames if ".py)" in f]
            out.append({"call": str(name), "start": start, "frames": (python or frames)[:6]})
    return out


def host_sync(seen: Seen) -> list[Finding]:
    """The host waits for the device inside the steps: device, stream or event synchronisations and
    synchronous copies (the CUDA calls), or, in a trace without CUDA (a CPU run under torch.profiler), a
    tensor read on the host (`aten::_local_scalar_dense`, what .item() runs) outside the optimizer's own
    step (whose step counters live on the host). The harness's phase clock's synchronisations are not
    counted."""
    steps = seen.steps
    if steps.empty:
        return []
    if len(seen.calls):
        found = seen.calls[seen.calls["name"].isin(SYNC_CALLS)]
        found = found[~seen.instruments.is_sync(found)]
        what = "blocking calls"
        backtraces = "runtime"
    elif len(seen.ops):
        found = seen.ops[seen.ops["name"].isin(ITEM_OPS)]
        optimizer = pd.concat([named_ranges(seen.trace, OPTIMIZER_STEP), seen.phase_ranges(OPTIMIZER)])
        found = found[~inside(optimizer, found["start"].to_numpy(), found["pid"].to_numpy())]
        what, backtraces = "host reads of a tensor", ""
    else:
        return []
    found = found[seen.in_steps(found["start"].to_numpy(), found["pid"].to_numpy())]
    if found.empty or len(found) < seen.th.syncs_per_step * len(steps):
        return []
    dur = (found["end"] - found["start"]).to_numpy()
    named = _named(found, top=len(SYNC_CALLS))
    kinds = ", ".join(f"{c['calls']:,} {c['name']}" for c in named)
    evidence = (
        f"{len(found):,} {what} in {len(steps)} steps ({kinds}): the host waits {ms(dur.sum())} in all, "
        f"longest {ms(dur.max())}; on a GPU each waits for every kernel queued before it"
    )
    excluded = len(seen.instruments.syncs)
    if excluded:
        evidence += f" (the harness's {excluded:,} phase-edge synchronisations are not counted)"
    fix = (
        "remove synchronisations from the step: no .item(), print or .cpu() of a tensor inside it; copy to "
        "the host with non_blocking=True into pinned memory and read it a step later"
    )
    data = {
        "calls": named,
        "steps": len(steps),
        "per step": seen.per_step(len(found)),
        "host time (ns)": int(dur.sum()),
        "longest (ns)": int(dur.max()),
        "harness's synchronisations left out": excluded,
    }
    if backtraces:
        data["backtraces"] = _backtraces(seen, backtraces, found)
    where = seen.place(found["start"].to_numpy(), dur, found["pid"].to_numpy())
    return [Finding("host-sync", int(dur.sum()), where, evidence, fix, data=data)]


def _outermost(rs: pd.DataFrame) -> pd.DataFrame:
    """Ranges not inside another of the same process (torch.profiler's DataLoader range inside a `data`
    range is one wait, not two)."""
    rs = rs.sort_values(["pid", "start", "end"], ascending=[True, True, False]).reset_index(drop=True)
    keep, reach = [], {}
    for pid, start, end in zip(rs["pid"], rs["start"], rs["end"], strict=True):
        keep.append(end > reach.get(pid, -1) or start >= reach.get(pid, -1))
        reach[pid] = max(reach.get(pid, -1), end)
    return rs[np.array(keep, dtype=bool)]


def _loader_threads(seen: Seen) -> dict[int, str]:
    """The DataLoader threads of the program that ran the steps. nsys names every process of the machine
    (its PROCESSES and ThreadNames tables), another program's loader workers too, and traces none of a
    program's forked workers: a worker is forked by the program, after it, so its pid is above the lowest
    pid that ran steps (a worker of a process started later, or past a wrap of the pids, is not told
    apart)."""
    if seen.steps.empty:
        return {}
    first = int(pid_of(seen.steps["pid"].to_numpy()).min())
    return {t: n for t, n in seen.threads.items() if n in LOADER_THREADS and int(pid_of(t)) >= first}


def loading_and_gaps(seen: Seen) -> list[Finding]:
    """The steps waiting for their data, where a loader was seen (its ranges: torch.profiler's
    `enumerate(DataLoader)`, a `data` range, in a step or between two; or DataLoader's worker threads in
    the capture): the loader's time with the GPU idle, and the gaps between steps the loader's workers were
    alive for. What is left of the GPU-idle gaps between steps, outside any loader's range, is a host gap,
    with what the host did in it. The harness's own time between its steps is neither."""
    steps = seen.steps.sort_values(["pid", "start"])
    if steps.empty or not seen.step_time:
        return []
    loads = _outermost(named_ranges(seen.trace, LOADER_RANGES))
    if len(loads):
        first, last = steps.groupby("pid")["start"].min(), steps.groupby("pid")["end"].max()
        lo, hi = loads["pid"].map(first), loads["pid"].map(last)
        loads = loads[(loads["start"] >= lo) & (loads["start"] < hi)]
    workers = _loader_threads(seen)
    gaps = []
    for pid, ps in steps.groupby("pid"):
        ends, starts = ps["end"].to_numpy()[:-1], ps["start"].to_numpy()[1:]
        keep = starts > ends
        gaps.append(pd.DataFrame({"start": ends[keep], "end": starts[keep], "pid": pid}))
    gaps = pd.concat(gaps, ignore_index=True)
    gaps = gaps[~gaps["pid"].isin(seen.instruments.harness_pids)]  # the harness's own time between steps
    out = []
    if len(loads) or workers:
        spans = pd.concat(
            [loads[["start", "end", "pid"]], gaps if workers else gaps.iloc[:0]], ignore_index=True
        )
        idle = seen.idle(spans["start"].to_numpy(), spans["end"].to_numpy(), spans["pid"].to_numpy())
        found = _data_loader(seen, loads, gaps if workers else gaps.iloc[:0], workers, spans, idle)
        out += found
        if workers:
            return out
    if len(gaps):
        idle = seen.idle(gaps["start"].to_numpy(), gaps["end"].to_numpy(), gaps["pid"].to_numpy())
        loading = _covered(gaps, loads)  # a loader's range between steps is the loader's
        out += _host_gap(seen, gaps, np.maximum(idle - loading, 0))
    return out


def _covered(spans: pd.DataFrame, by: pd.DataFrame) -> np.ndarray:
    """Per span: its time inside the ranges `by` of the same process."""
    out = np.zeros(len(spans), dtype=np.int64)
    pids = spans["pid"].to_numpy()
    for pid in np.unique(pids):
        at, mine = pids == pid, by[by["pid"].to_numpy() == pid]
        lo, hi = spans["start"].to_numpy()[at], spans["end"].to_numpy()[at]
        out[at] = clipped_sums(mine["start"].to_numpy(), mine["end"].to_numpy(), lo, hi)
    return out


def _data_loader(
    seen: Seen,
    loads: pd.DataFrame,
    gaps: pd.DataFrame,
    workers: dict[int, str],
    spans: pd.DataFrame,
    idle: np.ndarray,
) -> list[Finding]:
    stake = int(idle.sum())
    if stake < seen.th.data_loading_share * seen.step_time:
        return []
    parts = []
    # a capture without GPU work (a CPU run) has no GPU to idle: the loader's whole time is at stake
    idling = "with the GPU idle" if seen.has_gpu else "in them (no GPU work in the capture: their whole time)"
    if len(loads):
        names = sorted(set(loads["name"]))
        parts.append(
            f"{counted(len(loads), 'loader range')} ({', '.join(names)}), "
            f"{ms(idle[: len(loads)].sum())} {idling}"
        )
    if len(gaps):
        parts.append(
            f"{counted(len(gaps), 'gap')} between steps with DataLoader workers alive, "
            f"{ms(idle[len(loads) :].sum())}"
        )
    host = seen.os_calls
    if len(host) and len(loads):
        host = host[inside(loads, host["start"].to_numpy(), host["pid"].to_numpy())]
    named = _named(host) if len(loads) else []
    evidence = "; ".join(parts) + f"; the {len(seen.steps)} steps take {ms(seen.step_time)}"
    if named:
        evidence += f"; in the loader's ranges the host: {_said(named)}"
    if workers:
        evidence += f"; {len(workers)} DataLoader threads ({', '.join(sorted(set(workers.values())))})"
    fix = "load the next batch while the step runs: DataLoader(num_workers=N, " + (
        "pin_memory=True, persistent_workers=True, prefetch_factor=2) and .to(device, non_blocking=True)"
        if seen.has_gpu
        else "persistent_workers=True, prefetch_factor=2)"  # pinned memory and async copies are a GPU's
    )
    data = {
        "loader ranges": len(loads),
        "range names": sorted(set(loads["name"])),
        "gaps with workers": len(gaps),
        "GPU idle (ns)": stake,
        "steps": len(seen.steps),
        "step time (ns)": seen.step_time,
        "host calls": named,
        "loader threads": sorted(set(workers.values())),
    }
    where = seen.place(spans["start"].to_numpy(), idle, spans["pid"].to_numpy())
    return [Finding("data-loader", stake, where, evidence, fix, data=data)]


def _host_gap(seen: Seen, gaps: pd.DataFrame, idle: np.ndarray) -> list[Finding]:
    stake = int(idle.sum())
    if stake < seen.th.data_loading_share * seen.step_time:
        return []
    harness_threads = set(seen.instruments.threads)
    host = seen.os_calls
    host = host[~host["global_tid"].isin(harness_threads)]
    host = host[inside(gaps, host["start"].to_numpy(), host["pid"].to_numpy())]
    cuda = seen.calls
    cuda = cuda[inside(gaps, cuda["start"].to_numpy(), cuda["pid"].to_numpy())] if len(cuda) else cuda
    os_named, cuda_named = _named(host), _named(cuda)
    s = "s" if len(gaps) == 1 else ""  # the verb agrees with the count: `1 gap … takes`, `2 gaps … take`
    left = (
        f"leave{s} the GPU idle {ms(stake)}"
        if seen.has_gpu
        else f"take{s} {ms(stake)} (no GPU work in the capture)"
    )
    evidence = (
        f"{counted(len(gaps), 'gap')} between steps {left} (the {counted(len(seen.steps), 'step')} "
        f"take{'s' if len(seen.steps) == 1 else ''} "
        f"{ms(seen.step_time)}); no data loader seen (no loader range, no DataLoader worker)"
    )
    if os_named or cuda_named:
        evidence += "; the host there: " + "; ".join(p for p in (_said(os_named), _said(cuda_named)) if p)
    else:
        evidence += "; the capture records no call of the host there (trace osrt and cuda to see them)"
    fix = (
        "find what the host does between steps (the calls above; a profile with --python-backtrace=cuda "
        "names their Python lines): move it out of the loop, or overlap it with the GPU's work"
    )
    data = {
        "gaps": len(gaps),
        "GPU idle (ns)": stake,
        "steps": len(seen.steps),
        "step time (ns)": seen.step_time,
        "OS runtime calls": os_named,
        "CUDA calls": cuda_named,
        "backtraces": _backtraces(seen, "osrt", host) + _backtraces(seen, "runtime", cuda),
    }
    where = seen.place(gaps["start"].to_numpy(), idle, gaps["pid"].to_numpy())
    return [Finding("host-gap", stake, where, evidence, fix, data=data)]


def recompile(seen: Seen) -> list[Finding]:
    """torch.compile compiling again during the run: on a stored run, Dynamo's counters (a frame compiled
    per step or more); in a capture, the host waiting for compiler processes in the measured forward
    phases (waitpid), at least once a step."""
    fix = (
        "stop the recompiles: torch.compile(dynamic=None or True) for shapes that change, the same shapes "
        "every step (pad or bucket), no Python values that change per step in the compiled code; "
        "TORCH_LOGS=recompiles says why each happened"
    )
    forward = seen.phase_ranges(FORWARD)
    host = seen.os_calls
    waits = host[host["name"].isin(COMPILE_WAITS)] if len(host) else host
    waits = (
        waits[inside(forward, waits["start"].to_numpy(), waits["pid"].to_numpy())] if len(waits) else waits
    )
    waited = int((waits["end"] - waits["start"]).sum()) if len(waits) else 0
    dynamo = seen.run.dynamo if seen.run else None
    steps = seen.run.steps if seen.run else 0
    gave_up = int(dynamo.get("recompile_limit_hits", 0)) if dynamo else 0
    if (
        dynamo
        and steps >= 2
        and (dynamo.get("frames", 0) >= steps or (gave_up and dynamo.get("frames", 0) >= 2))
    ):
        stake = int(seen.run.forward_ns or 0) if seen.run else 0
        every = (
            "a compile every step"
            if not gave_up
            else "a compile a step until Dynamo hit its recompile limit and ran the function eagerly after"
        )
        evidence = (
            f"torch.compile compiled {dynamo['frames']:,} frames into {dynamo.get('graphs', 0):,} graphs in "
            f"{steps} steps ({dynamo.get('graph_breaks', 0):,} graph breaks): {every}, in forward"
        )
        if waited:
            evidence += f"; in the measured forwards the host waits {ms(waited)} for compiler processes"
        data = {"dynamo": dict(dynamo), "steps": steps, "compiler waits (ns)": waited}
        return [Finding("recompile", max(stake, waited), "forward 100%", evidence, fix, data=data)]
    if len(forward) and len(waits) >= len(forward) and waited:
        evidence = (
            f"in {len(forward)} measured forward phases the host waits for compiler processes: "
            f"{_said(_named(waits))}"
        )
        data = {
            "forward phases": len(forward),
            "compiler waits": _named(waits),
            "compiler waits (ns)": waited,
        }
        where = seen.place(
            waits["start"].to_numpy(), (waits["end"] - waits["start"]).to_numpy(), waits["pid"].to_numpy()
        )
        return [Finding("recompile", waited, where, evidence, fix, data=data)]
    return []


def nsys_overhead_in_phases(seen: Seen) -> list[Finding]:
    """nsys's own work (PROFILER_OVERHEAD) inside a phase, large enough to change what its time says."""
    trace = seen.trace
    if not (trace.has("overhead") and trace.has("nvtx")):
        return []
    table = overhead_in_phases(trace, within=seen.measured)
    # a phase holding none of nsys's time is no finding at any threshold (overhead_share=0 asks for any)
    big = table[(table["Share (%)"] >= 100 * seen.th.overhead_share) & (table["Overhead (ns)"] > 0)]
    if big.empty:
        return []
    inside_ns = int(big["Overhead (ns)"].sum())
    parts = "; ".join(
        f"{r['Phase']}: {ms(r['Overhead (ns)'])} of {ms(r['Phase time (ns)'])} ({r['Share (%)']:.1f}%)"
        for _, r in big.iterrows()
    )
    where = ", ".join(f"{r['Phase']} {100 * r['Overhead (ns)'] / inside_ns:.0f}%" for _, r in big.iterrows())
    # a capture that began with the measured steps has left its warm-up out already
    fix = (
        "the profiler's own time is inside the phase: "
        + (
            "leave warm-up out of the capture (--nsys-capture measured) or compare "
            if seen.warmup_captured
            else "compare "
        )
        + "the phase with a run without nsys (`harness overhead`)"
    )
    data = {
        str(r["Phase"]): {"overhead (ns)": int(r["Overhead (ns)"]), "phase (ns)": int(r["Phase time (ns)"])}
        for _, r in big.iterrows()
    }
    return [
        Finding(
            "nsys-overhead-in-phase",
            inside_ns,
            where,
            f"nsys's own work inside phases: {parts}",
            fix,
            table,
            data,
        )
    ]
