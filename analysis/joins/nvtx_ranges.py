"""NVTX range instances as a frame: every range with its nesting on its thread (`all_ranges`), the name
nsys prints for it (`tagged`: DOMAIN:NAME) and those names grouped (`grouped_tags`, analysis.nvtx_names);
the `step` ranges that count (`measured_steps`) and the phase ranges no measured step holds.
The NVTX tables (analysis.tables.nvtx, nvtx_gpu), the crediting of kernels to ranges
(analysis.joins.nvtx_credits), the views and the comparisons read the ranges through these."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.intervals import levels, parents, sort_ranges
from analysis.nvtx_names import grouped_categories, grouping_notes
from analysis.readers.global_ids import pid_of, tid_of
from analysis.trace.trace import Trace
from workloads.names import ALL_PHASES, MEASURED, STEP

RANGE_COLUMNS = [
    "start_ns", "end_ns", "duration_ns", "name", "domain", "payload", "tid", "pid", "level", "parent",
    "style", "range_id", "global_tid",
]  # fmt: skip


def all_ranges(trace: Trace, *, keep: bool = True, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Every NVTX range instance (RANGE_COLUMNS, or only `columns`), in start order; push/pop ranges
    nested per thread. keep=False: the trace does not hold on to the NVTX frame for this (unless it held
    it before).

    `parent` is the parent's range_id (the export's NVTX_EVENTS rowid, what nsys calls RangeId); start/end
    ranges have level 0 and no parent. Asking for fewer columns builds fewer: attribution over 1.8M
    ranges reads six of them.
    """
    wanted = list(RANGE_COLUMNS if columns is None else columns)
    if unknown := [c for c in wanted if c not in RANGE_COLUMNS]:
        raise KeyError(f"no range column {unknown[0]!r}: {', '.join(RANGE_COLUMNS)}")
    raw_cols = ["start", "end", "global_tid", "pushpop"]
    raw_cols += [c for c in ("name", "domain", "payload") if c in wanted]
    if {"range_id", "parent"} & set(wanted):
        raw_cols.append("range_id")
    raw = trace.frame("nvtx", raw_cols, keep=keep)
    src = {c: raw[c] for c in raw.columns}  # each let go once the last column built from it is built
    del raw
    start, end = src.pop("start").to_numpy(), src.pop("end").to_numpy()
    gtid = src.pop("global_tid").to_numpy()
    pushpop = src.pop("pushpop").to_numpy(dtype=bool)
    n = len(start)
    # start/end ranges get a group of their own each, so none nests
    group = gtid.copy()
    alone = np.flatnonzero(~pushpop)
    group[alone] = -1 - alone
    del alone
    order = sort_ranges(group, start, end)
    parent_sorted = parents(group, start, end, order)
    del group
    small = np.int32 if n < 2**31 else np.int64  # positions: 1.8M ranges are 7 MB a column, not 14
    parent = np.full(n, -1, dtype=small)
    has = parent_sorted >= 0
    parent[order[has]] = order[parent_sorted[has]]
    level = np.empty(n, dtype=np.int32)
    level[order] = levels(parent_sorted)
    del order, parent_sorted, has
    final = np.lexsort((level, start))
    out: dict[str, object] = {}
    if "level" in wanted:
        out["level"] = level[final].astype(np.int64)
    del level
    if "parent" in wanted:
        ids = src["range_id"].to_numpy()
        parent_id = pd.array(ids[np.maximum(parent, 0)], dtype="Int64")
        parent_id[parent < 0] = pd.NA
        out["parent"] = parent_id.take(final)
        del parent_id
    del parent
    if "range_id" in wanted:
        out["range_id"] = src["range_id"].to_numpy()[final]
    src.pop("range_id", None)
    if "duration_ns" in wanted:
        out["duration_ns"] = (end - start)[final]
    for col, values in (("start_ns", start), ("end_ns", end)):
        if col in wanted:
            out[col] = values[final]
    del start, end
    for col in ("name", "domain", "payload"):
        if col in wanted:
            out[col] = src.pop(col).array.take(final)
    if "tid" in wanted:
        out["tid"] = tid_of(gtid[final])
    if "pid" in wanted:
        out["pid"] = pid_of(gtid[final])
    if "global_tid" in wanted:
        out["global_tid"] = gtid[final]
    del gtid
    if "style" in wanted:
        out["style"] = pd.Categorical.from_codes(pushpop[final].astype(np.int8) ^ 1, ["PushPop", "StartEnd"])
    return pd.DataFrame({c: out[c] for c in wanted}, copy=False)


def any_named(trace: Trace, names: Sequence[str]) -> bool:
    """Whether any NVTX range (right or not) has one of `names`: the name column alone, not the ranges."""
    raw = pd.Series(trace._columns("nvtx", ["name"], keep=False)["name"], copy=False)
    return bool(raw.isin(list(names)).any())


def step_phases(trace: Trace) -> tuple[str, ...]:
    """The phases an export holds by the harness's convention: the names of the push/pop ranges nested
    directly in `step` ranges on their thread, in the order they first open (train: forward, backward,
    optimizer; generate: prefill, decode; a program's own names). () where no `step` range holds one."""
    if not trace.has("nvtx") or not any_named(trace, [STEP]):
        return ()
    ranges = all_ranges(trace, keep=trace.holds("nvtx", ["start"]), columns=["name", "range_id", "parent"])
    steps = ranges.loc[ranges["name"].astype(object) == STEP, "range_id"].to_numpy()
    inside = ranges["parent"].isin(steps).to_numpy(dtype=bool, na_value=False)
    names = ranges["name"].astype(object)[inside]
    return tuple(str(n) for n in pd.unique(names[names.notna() & (names != STEP)]))


def phases_of(trace: Trace) -> tuple[str, ...]:
    """The phases of an export: `step_phases`; where no `step` range holds any, the harness's phase names
    (of every mode) that name a range in it, in their order (workloads.names.ALL_PHASES)."""
    found = step_phases(trace)
    if found or not trace.has("nvtx"):
        return found
    raw = pd.Series(trace._columns("nvtx", ["name"], keep=False)["name"], copy=False)
    present = set(raw[raw.isin(list(ALL_PHASES))].astype(str))
    return tuple(p for p in ALL_PHASES if p in present)


def tagged(ranges: pd.DataFrame) -> pd.Series:
    """The name nsys prints: DOMAIN:NAME for ranges in a named domain."""
    name = ranges["name"].astype(object)
    domain = ranges["domain"].astype(object)
    named = domain.notna()
    if not named.any():
        return name
    out = name.copy()
    out[named] = domain[named] + ":" + name[named]
    return out


def grouped_tags(ranges: pd.DataFrame, by: str = "op") -> tuple[pd.Series, list[str]]:
    """The printed name of each range (`tagged`) grouped as `by` says (analysis.nvtx_names: "op" by
    operator, "shape" by operator and input sizes, "raw" as recorded), and the note saying so where
    PyTorch's per-call fields are in the names."""
    cat, fields = grouped_categories(tagged(ranges), by)
    return pd.Series(cat, index=ranges.index, copy=False), grouping_notes(fields, by)


def open_ranges_said(trace: Trace) -> str | None:
    """How many NVTX ranges never end (an nsys export's ranges with no end, or the capture's end as nsys
    gives a range still open when it stops), in words; None when every range ends. Their times run to the
    capture's end, whatever they measured, so no table of them reads as sound without this."""
    n = int(trace.capture_facts().get("open_ranges", 0))
    if not n:
        return None
    said = f"{n:,} NVTX range{'s never end: their' if n != 1 else ' never ends: its'} time runs to the "
    inside = "them" if n != 1 else "it"
    return f"{said}capture's end (the program exited, or the capture stopped, inside {inside})"


def note_open_ranges(trace: Trace) -> None:
    """`open_ranges_said` in the trace's notes, where some range never ends."""
    if said := open_ranges_said(trace):
        trace.note(said)


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


def stepless_phases(ranges: pd.DataFrame, steps: pd.DataFrame, phase_ranges: pd.DataFrame) -> int:
    """The phase ranges inside a `measured` range of their process that lie in no measured step range: a
    step whose own range was lost or never closed, which phase mode leaves out with its kernels."""
    measured = ranges[ranges["name"] == MEASURED]
    if measured.empty or phase_ranges.empty:
        return 0
    p_pid, p_start, p_end = (phase_ranges[c].to_numpy() for c in ("pid", "start_ns", "end_ns"))
    inside = np.zeros(len(phase_ranges), dtype=bool)
    for m in measured.itertuples():
        inside |= (p_pid == m.pid) & (p_start >= m.start_ns) & (p_end <= m.end_ns)
    held = np.zeros(len(phase_ranges), dtype=bool)
    for pid, g in steps.groupby("pid"):
        g = g.sort_values("start_ns")
        s_start, s_end = g["start_ns"].to_numpy(), g["end_ns"].to_numpy()
        mine = p_pid == pid
        at = np.searchsorted(s_start, p_start[mine], side="right") - 1
        held[mine] = (at >= 0) & (p_end[mine] <= s_end[np.maximum(at, 0)])
    return int((inside & ~held).sum())
