"""GPU time per NVTX range: like `nsys stats -r nvtxkernsum` (nvtx_gpu_proj_sum), plus the phase view.

Each kernel is attributed through its CUDA launch call (joined on correlationId, each call counted once):

- thread mode, inclusive (the default; nvtxkernsum's rule): every push/pop range open on the launching
  thread around the call, so a kernel counts for a range and for each range around it.
- thread mode, exclusive: only the innermost such range, so the ranges' times add up to the kernel total.
- phase mode (the default for harness runs): the harness phase range (forward, backward, optimizer) whose
  span contains the call's start on any thread of the same process. PyTorch runs backward on autograd's
  own thread, so thread attribution leaves a main-thread `backward` range with none of its kernels.

Where nsys counts one kernel twice for one row (its runtime call recorded twice; a range nested in a range
of the same name), it is counted once here and a note says so.

Phase mode counts the measured steps only: `step` ranges inside the harness's `measured` range when the
export has one, else every `step` range (else everything). `phase_check` says whether the phases add up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd

from analysis.errors import ExportError
from analysis.intervals import enclosing, parents, sort_ranges
from analysis.names import MEASURED, STEP, TRAIN_PHASES
from analysis.nvtx import all_ranges, tagged
from analysis.runtime import PROCESS_MASK, kernel_launches, pid_of, tid_of
from analysis.stats import describe, time_percent
from analysis.trace import Trace

PHASES = TRAIN_PHASES
UNATTRIBUTED = "unattributed"
KERNSUM_COLUMNS = [
    "NVTX Range", "Style", "PID", "TID", "NVTX Inst", "Kern Inst", "Total Time (ns)", "Avg (ns)",
    "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)", "Kernel Name",
]  # fmt: skip
Mode = Literal["auto", "phase", "thread"]  # auto: phase when the export has phase ranges


def _require(trace: Trace) -> None:
    trace.require("kernels", "CUDA kernel data")
    trace.require("runtime", "CUDA runtime calls (needed to tie kernels to NVTX ranges)")
    trace.require("nvtx", "NVTX data")


def _nesting(ranges: pd.DataFrame, by_thread: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group, sort order, parent in sorted positions) of `ranges`."""
    group = ranges["global_tid"].to_numpy()
    if not by_thread:
        group = group & PROCESS_MASK
    start, end = ranges["start_ns"].to_numpy(), ranges["end_ns"].to_numpy()
    order = sort_ranges(group, start, end)
    return group, order, parents(group[order], start[order], end[order])


def _containing(ranges: pd.DataFrame, launches: pd.DataFrame, by_thread: bool, point: bool) -> np.ndarray:
    """Row of `ranges` (positional) innermost around each launch call, or -1."""
    if ranges.empty or launches.empty:
        return np.full(len(launches), -1, dtype=np.int64)
    group, order, parent = _nesting(ranges, by_thread)
    start, end = ranges["start_ns"].to_numpy()[order], ranges["end_ns"].to_numpy()[order]
    has = launches["has_call"].to_numpy()
    q_group = launches["global_tid"].to_numpy()[has]
    if not by_thread:
        q_group = q_group & PROCESS_MASK
    q_start = launches["call_start"].to_numpy()[has]
    q_end = q_start if point else launches["call_end"].to_numpy()[has]
    hit = enclosing(group[order], start, end, parent, q_group, q_start, q_end)
    out = np.full(len(launches), -1, dtype=np.int64)
    out[has] = np.where(hit >= 0, order[np.maximum(hit, 0)], -1)
    return out


def _with_enclosing(ranges: pd.DataFrame, launch: np.ndarray, inner: np.ndarray) -> tuple[np.ndarray, ...]:
    """(launch, range) pairs: each launch with its innermost range and every range around that one."""
    if ranges.empty:
        return launch, inner
    _, order, parent_sorted = _nesting(ranges, by_thread=True)
    parent = np.full(len(ranges), -1, dtype=np.int64)
    parent[order] = np.where(parent_sorted >= 0, order[np.maximum(parent_sorted, 0)], -1)
    launches, hits = [launch], [inner]
    cur_launch, cur = launch[inner >= 0], parent[inner[inner >= 0]]
    while len(cur):
        keep = cur >= 0
        cur_launch, cur = cur_launch[keep], cur[keep]
        launches.append(cur_launch)
        hits.append(cur)
        cur = parent[cur]
    return np.concatenate(launches), np.concatenate(hits)


def measured_steps(ranges: pd.DataFrame) -> pd.DataFrame:
    """The `step` ranges that count: those inside a `measured` range when there is one, else all."""
    steps = ranges[ranges["name"] == STEP]
    measured = ranges[ranges["name"] == MEASURED]
    if measured.empty or steps.empty:
        return steps
    inside = np.zeros(len(steps), dtype=bool)
    for m in measured.itertuples():
        inside |= (
            (steps["pid"].to_numpy() == m.pid)
            & (steps["start_ns"].to_numpy() >= m.start_ns)
            & (steps["end_ns"].to_numpy() <= m.end_ns)
        )
    return steps[inside]


def attribute(
    trace: Trace,
    mode: Mode = "phase",
    phases: Sequence[str] = PHASES,
    names: str = "demangled",
    exclusive: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(launches, ranges, pairs): pairs has one row per (launch, range) credit, positional rows into
    launches and ranges (range -1: none). Phase mode and exclusive thread mode credit one range at most;
    inclusive thread mode credits every range open around the call on its thread."""
    _require(trace)
    launches = kernel_launches(trace, names=names)
    ranges = all_ranges(trace)
    if mode == "auto":
        mode = "phase" if ranges["name"].isin(list(phases)).any() else "thread"
    launches.attrs["mode"] = mode
    if mode == "thread":
        if (ranges["style"] != "PushPop").any():
            ranges = ranges[ranges["style"] == "PushPop"].reset_index(drop=True)
        inner = _containing(ranges, launches, by_thread=True, point=False)
        launch = np.arange(len(launches), dtype=np.int64)
        if not exclusive:
            launch, inner = _with_enclosing(ranges, launch, inner)
        launches.attrs["exclusive"] = exclusive
        return launches, ranges, pd.DataFrame({"launch": launch, "range": inner})
    if mode != "phase":
        raise ValueError(f"unknown mode {mode!r}: auto, phase or thread")
    steps = measured_steps(ranges)
    if not steps.empty:
        in_step = _containing(steps.reset_index(drop=True), launches, by_thread=False, point=True)
        launches = launches[in_step >= 0].reset_index(drop=True)
    phase_ranges = ranges[ranges["name"].isin(list(phases))].reset_index(drop=True)
    hit = _containing(phase_ranges, launches, by_thread=False, point=True)
    launches.attrs["mode"] = "phase"
    return launches, phase_ranges, pd.DataFrame({"launch": np.arange(len(launches)), "range": hit})


def _range_codes(ranges: pd.DataFrame) -> tuple[np.ndarray, dict[int, tuple[str, str]]]:
    """An integer per range for its (printed name, style), and the code -> (name, style) table."""
    name = pd.Categorical(ranges["name"])
    domain = pd.Categorical(ranges["domain"])
    style = pd.Categorical(ranges["style"], categories=["PushPop", "StartEnd"])
    n_dom, n_style = len(domain.categories) + 1, 2
    codes = (name.codes.astype(np.int64) * n_dom + domain.codes + 1) * n_style + style.codes
    table = {}
    for code in np.unique(codes):
        rest, s = divmod(int(code), n_style)
        n, d = divmod(rest, n_dom)
        label = str(name.categories[n])
        if d:
            label = f"{domain.categories[d - 1]}:{label}"
        table[int(code)] = (label, str(style.categories[s]))
    return codes, table


def _range_labels(
    ranges: pd.DataFrame, launches: pd.DataFrame, pairs: pd.DataFrame
) -> tuple[pd.DataFrame, dict]:
    """Per credit: its range's (name, style) code (-1: none), PID, TID and range id (the launching
    thread's PID/TID where it has no range), the launch, the kernel's duration and name id; and the
    code table."""
    idx = pairs["range"].to_numpy()
    launch = pairs["launch"].to_numpy()
    hit = idx >= 0
    pick = np.maximum(idx, 0)
    codes, table = _range_codes(ranges) if len(ranges) else (np.zeros(1, dtype=np.int64), {})
    if ranges.empty:
        ranges = pd.DataFrame({c: [0] for c in ("pid", "tid", "range_id")})
    rows = pd.DataFrame(
        {
            "label": np.where(hit, codes[pick], -1),
            "PID": np.where(
                hit, ranges["pid"].to_numpy()[pick], pid_of(launches["global_pid"].to_numpy()[launch])
            ),
            "TID": np.where(
                hit, ranges["tid"].to_numpy()[pick], tid_of(launches["global_tid"].to_numpy()[launch])
            ),
            "range_key": np.where(hit, ranges["range_id"].to_numpy()[pick], -1),
            "launch": launch,
            "duration": launches["duration"].to_numpy()[launch],
            "name_id": launches["name_id"].to_numpy()[launch],
        }
    )
    return rows, table


def _once_per_label(rows: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """One credit per kernel and row label: a kernel inside nested ranges of one name counts once."""
    twice = rows.duplicated(["launch", "label", "PID", "TID"])
    if twice.any():
        notes.append(
            f"{int(twice.sum()):,} kernels ran inside nested NVTX ranges of the same name; each is counted "
            "once per range name (nsys stats counts it once per range)"
        )
        rows = rows[~twice]
    return rows


def _with_labels(out: pd.DataFrame, table: dict) -> pd.DataFrame:
    labels = out["label"].map(lambda c: table.get(int(c), (None, None)))
    return out.assign(**{"NVTX Range": labels.map(lambda t: t[0]), "Style": labels.map(lambda t: t[1])}).drop(
        columns="label"
    )


def _credits(
    trace: Trace, mode: Mode, phases: Sequence[str], names: str, exclusive: bool
) -> tuple[pd.DataFrame, pd.DataFrame, dict, str, list[str]]:
    """(all credits, credits counted once per label, code table, mode, notes)."""
    launches, ranges, pairs = attribute(trace, mode, phases, names, exclusive)
    mode = launches.attrs["mode"]
    notes = [*trace.notes, *launches.attrs.get("notes", [])]
    rows, table = _range_labels(ranges, launches, pairs)
    return rows, _once_per_label(rows, notes), table, mode, notes


def nvtx_gpu_kernels(
    trace: Trace,
    *,
    mode: Mode = "thread",
    phases: Sequence[str] = PHASES,
    top: int | None = None,
    names: str = "demangled",
    exclusive: bool = False,
) -> pd.DataFrame:
    """Kernels per NVTX range, like nvtxkernsum (KERNSUM_COLUMNS): ordered by range, PID, TID, then the
    largest total; `top` keeps the first N kernels of each range. Kernels under no range have no name.
    """
    every, rows, table, mode, notes = _credits(trace, mode, phases, names, exclusive)
    if mode == "phase":
        every, rows = every[every["label"] >= 0], rows[rows["label"] >= 0]
    keys = ["label", "PID", "TID", "name_id"]
    out = describe(rows, keys, count_name="Kern Inst")
    inst = every.groupby(keys, sort=False)["range_key"].nunique().rename("NVTX Inst").reset_index()
    out = _with_labels(out.merge(inst, on=keys, how="left"), table)
    out.loc[out["NVTX Range"].isna(), "NVTX Inst"] = 0
    out["Kernel Name"] = out["name_id"].map(trace.strings(out["name_id"].unique()))
    out = out.sort_values(["Total Time (ns)"], ascending=False, kind="stable")
    out = out.sort_values(["NVTX Range", "PID", "TID"], kind="stable", na_position="first")
    if top is not None:
        out = out.groupby(["NVTX Range", "PID", "TID"], dropna=False, sort=False).head(top)
    out = out[KERNSUM_COLUMNS].reset_index(drop=True)
    out.attrs.update(notes=notes, mode=mode, exclusive=exclusive)
    return out


def nvtx_gpu_summary(
    trace: Trace, *, mode: Mode = "phase", phases: Sequence[str] = PHASES, exclusive: bool = False
) -> pd.DataFrame:
    """GPU time per range: Range (Style, PID, TID in thread mode), NVTX Inst, Kern Inst, the kernel-time
    statistics and Time (%). Phase mode lists the phases in `phases` order, measured steps only.
    """
    every, rows, table, mode, notes = _credits(trace, mode, phases, "demangled", exclusive)
    every, rows = every[every["label"] >= 0], rows[rows["label"] >= 0]
    keys = ["label"] if mode == "phase" else ["label", "PID", "TID"]
    out = describe(rows, keys, count_name="Kern Inst")
    inst = every.groupby(keys, sort=False)["range_key"].nunique().rename("NVTX Inst").reset_index()
    out = _with_labels(out.merge(inst, on=keys, how="left"), table)
    if mode == "phase":
        # one row per phase name (a phase's ranges may come from several threads)
        rank = {p: i for i, p in enumerate(phases)}
        out = out.sort_values("NVTX Range", key=lambda s: s.map(rank), kind="stable")
        keys = ["NVTX Range"]
    else:
        out = out.sort_values("Total Time (ns)", ascending=False, kind="stable")
        keys = ["NVTX Range", "Style", "PID", "TID"]
    out.insert(0, "Time (%)", time_percent(out["Total Time (ns)"]))
    cols = [*keys, "NVTX Inst", "Kern Inst"]
    stats = [c for c in out.columns if c not in cols and c not in ("Style", "PID", "TID")]
    out = out[[*cols, *stats]].rename(columns={"NVTX Range": "Range"}).reset_index(drop=True)
    out.attrs.update(notes=notes, mode=mode, exclusive=exclusive)
    return out


def phase_check(trace: Trace, phases: Sequence[str] = PHASES) -> pd.DataFrame:
    """Do the phases add up? GPU time of each phase, the unattributed rest and all kernel time of the
    measured steps (Phase, Kernels, Total Time (ns), Share (%)).
    """
    launches, ranges, pairs = attribute(trace, "phase", phases)
    hit = pairs["range"].to_numpy()
    names = np.where(
        hit >= 0,
        ranges["name"].to_numpy(dtype=object)[np.maximum(hit, 0)] if len(ranges) else UNATTRIBUTED,
        UNATTRIBUTED,
    )
    per = pd.DataFrame({"Phase": names, "duration": launches["duration"].to_numpy()})
    g = per.groupby("Phase")["duration"]
    totals, counts = g.sum(), g.size()
    order = [*phases, UNATTRIBUTED]
    whole = int(per["duration"].sum())
    out = pd.DataFrame(
        {
            "Phase": [*order, "all kernels"],
            "Kernels": [int(counts.get(p, 0)) for p in order] + [len(per)],
            "Total Time (ns)": [int(totals.get(p, 0)) for p in order] + [whole],
        }
    )
    out["Share (%)"] = out["Total Time (ns)"] / whole * 100 if whole else 0.0
    out.attrs["notes"] = [*trace.notes, *launches.attrs.get("notes", [])]
    return out


def kernels_in_ranges(
    trace: Trace, range_name: str, *, names: str = "demangled", extra: tuple[str, ...] = ()
) -> pd.DataFrame:
    """Kernels (name_id, duration, extra fields) launched while a range named `range_name` was open in
    their process (any thread)."""
    _require(trace)
    launches = kernel_launches(trace, names=names, extra=extra)
    ranges = all_ranges(trace)
    picked = ranges[(ranges["name"] == range_name) | (tagged(ranges) == range_name)].reset_index(drop=True)
    if picked.empty:
        raise ExportError(f"no NVTX range named {range_name!r} in {trace.path}")
    hit = _containing(picked, launches, by_thread=False, point=True)
    out = launches[hit >= 0].reset_index(drop=True)
    out.attrs["notes"] = launches.attrs.get("notes", [])
    return out


PROJECTION_COLUMNS = [
    "Name", "Projected Start (ns)", "Projected Duration (ns)", "Orig Start (ns)", "Orig Duration (ns)",
    "Style", "PID", "TID", "NumGPUOps", "Lvl", "NumChild", "RangeId", "ParentId", "RangeStack",
]  # fmt: skip


def gpu_ops(trace: Trace) -> pd.DataFrame:
    """Kernels, memory copies and sets with their launch call (has_call, call_start, call_end,
    global_tid), like `kernel_launches` but for every kind of GPU operation."""
    from analysis.memops import memory_ops

    cols = ["start", "end", "correlation_id", "global_pid"]
    kern = kernel_launches(trace, extra=("start", "end"))
    parts = [kern[[*cols, "has_call", "call_start", "call_end", "global_tid"]]]
    if trace.has("memcpy") or trace.has("memset"):
        from analysis.runtime import PROCESS_MASK as MASK
        from analysis.runtime import _call_key, _lookup, runtime_calls

        ops = memory_ops(trace)
        pid = np.zeros(len(ops), dtype=np.int64)
        if "global_pid" in ops:
            pid = ops["global_pid"].to_numpy()
        calls = runtime_calls(trace)
        found = _lookup(
            _call_key(calls["correlation_id"].to_numpy(), calls["global_tid"].to_numpy() & MASK),
            _call_key(ops["correlation_id"].to_numpy(), pid),
        )
        has = found >= 0
        pick = np.maximum(found, 0)
        parts.append(
            pd.DataFrame(
                {
                    "start": ops["start"].to_numpy(),
                    "end": ops["end"].to_numpy(),
                    "correlation_id": ops["correlation_id"].to_numpy(),
                    "global_pid": pid,
                    "has_call": has,
                    "call_start": calls["start"].to_numpy()[pick],
                    "call_end": calls["end"].to_numpy()[pick],
                    "global_tid": calls["global_tid"].to_numpy()[pick],
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def nvtx_gpu_projection(trace: Trace) -> pd.DataFrame:
    """Each push/pop range projected onto the GPU, like `nsys stats -r nvtxgpuproj`: the span from the first
    start to the last end of the GPU operations launched inside it (or inside a range it encloses) on its
    thread. Ranges without GPU operations are left out."""
    from analysis.nvtx import nvtx_trace

    _require(trace)
    ranges = all_ranges(trace)
    ranges = ranges[ranges["style"] == "PushPop"].reset_index(drop=True)
    ops = gpu_ops(trace)
    inner = _containing(ranges, ops, by_thread=True, point=False)
    op, hit = _with_enclosing(ranges, np.arange(len(ops), dtype=np.int64), inner)
    keep = hit >= 0
    pairs = pd.DataFrame(
        {
            "range": hit[keep],
            "start": ops["start"].to_numpy()[op[keep]],
            "end": ops["end"].to_numpy()[op[keep]],
        }
    )
    g = pairs.groupby("range")
    span = pd.DataFrame({"first": g["start"].min(), "last": g["end"].max(), "ops": g.size()})
    tree = nvtx_trace(trace).set_index("RangeId")
    r = ranges.iloc[span.index.to_numpy()]
    ids = r["range_id"].to_numpy()
    out = pd.DataFrame(
        {
            "Name": tree.loc[ids, "Name"].to_numpy(),
            "Projected Start (ns)": span["first"].to_numpy(),
            "Projected Duration (ns)": (span["last"] - span["first"]).to_numpy(),
            "Orig Start (ns)": r["start_ns"].to_numpy(),
            "Orig Duration (ns)": r["duration_ns"].to_numpy(),
            "Style": r["style"].to_numpy(),
            "PID": r["pid"].to_numpy(),
            "TID": r["tid"].to_numpy(),
            "NumGPUOps": span["ops"].to_numpy(),
            "Lvl": tree.loc[ids, "Lvl"].to_numpy(),
            "NumChild": tree.loc[ids, "NumChild"].to_numpy(),
            "RangeId": ids,
            "ParentId": tree.loc[ids, "ParentId"].to_numpy(),
            "RangeStack": tree.loc[ids, "RangeStack"].to_numpy(),
        }
    )
    out = out.sort_values(["Projected Start (ns)", "RangeId"], kind="stable").reset_index(drop=True)
    out.attrs["notes"] = list(trace.notes)
    return out[PROJECTION_COLUMNS]
