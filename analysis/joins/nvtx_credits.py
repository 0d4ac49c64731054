"""Which NVTX ranges each kernel's time is credited to: kernels joined to their launch calls and to the
ranges open around them (thread mode) or to the phase range of their process (phase mode), numbered into
the rows of a table (`_credits`), for analysis.tables.nvtx_gpu's tables."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from analysis.intervals import enclosing, parents, sort_ranges
from analysis.joins.nvtx_ranges import (
    all_ranges,
    any_named,
    measured_steps,
    note_open_ranges,
    phases_of,
    stepless_phases,
)
from analysis.joins.nvtx_sweep import RANGE_READ, Unordered, thread_sweep
from analysis.joins.runtime import kernel_launches
from analysis.nvtx_names import grouped_categories, grouping_notes
from analysis.readers.global_ids import PROCESS_MASK, pid_of, thread_key, tid_of
from analysis.stats import BLOCK, durations_by_group, factorize, factorize_blocks, figures, group_ids
from analysis.trace.trace import Trace
from workloads.names import counted

Mode = Literal["auto", "phase", "thread"]  # auto: phase when the export has phase ranges


def _require(trace: Trace) -> None:
    trace.require("kernels", "CUDA kernel data")
    trace.require("runtime", "CUDA runtime calls (needed to tie kernels to NVTX ranges)")
    trace.require("nvtx", "NVTX data")
    note_open_ranges(trace)


def _containing(
    ranges: pd.DataFrame, launches: pd.DataFrame, by_thread: bool, point: bool, release: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(row of `ranges` innermost around each launch call or -1, each range's parent row or -1): the
    ranges nested within a thread (by_thread) or a process, the parents the ones the search walked, so a
    walk up from a hit meets the same ranges. release: the times of the ranges and the launch calls are
    taken out of the frames (they are let go once sorted and searched)."""
    if ranges.empty:
        return np.full(len(launches), -1, dtype=np.int64), np.zeros(0, dtype=np.int64)

    def column(df: pd.DataFrame, name: str) -> np.ndarray:
        return (df.pop(name) if release else df[name]).to_numpy()

    group = ranges["global_tid"].to_numpy()
    if not by_thread:
        group = group & PROCESS_MASK
    start, end = column(ranges, "start_ns"), column(ranges, "end_ns")
    order = sort_ranges(group, start, end)
    # sorted once, for the nesting and the search both (1.8M ranges: each sorted copy is 14 MB)
    group, start, end = group[order], start[order], end[order]
    parent_sorted = parents(group, start, end)
    has = launches["has_call"].to_numpy()
    every = has.all()  # most exports: every kernel has its launch call, and no copies are needed

    def queried(values: np.ndarray) -> np.ndarray:
        return values if every else values[has]

    q_group = queried(launches["global_tid"].to_numpy())
    if not by_thread:
        q_group = q_group & PROCESS_MASK
    q_start = queried(column(launches, "call_start"))
    call_end = column(launches, "call_end")
    q_end = q_start if point else queried(call_end)
    del call_end
    hit = enclosing(group, start, end, parent_sorted, q_group, q_start, q_end)
    del group, start, end, q_group, q_start, q_end
    out = np.full(len(launches), -1, dtype=np.int64)
    out[has] = np.where(hit >= 0, order[np.maximum(hit, 0)], -1)
    del hit
    parent = np.full(len(order), -1, dtype=np.int32 if len(order) < 2**31 else np.int64)
    up = parent_sorted >= 0
    parent[order[up]] = order[parent_sorted[up]]
    return out, parent


def _with_enclosing(parent: np.ndarray, launch: np.ndarray, inner: np.ndarray) -> tuple[np.ndarray, ...]:
    """(launch, range) pairs: each launch with its innermost range and every range around that one
    (`parent`: each range's parent row, from `_containing`)."""
    if not len(parent):
        return launch, inner
    small = np.int32 if max(len(parent), len(launch)) < 2**31 else np.int64  # 6M credits for 1M kernels
    parent = parent.astype(small)
    launches, hits = [launch.astype(small)], [inner.astype(small)]
    cur_launch, cur = launches[0][inner >= 0], parent[inner[inner >= 0]]
    while len(cur):
        keep = cur >= 0
        cur_launch, cur = cur_launch[keep], cur[keep]
        launches.append(cur_launch)
        hits.append(cur)
        cur = parent[cur]
    del cur_launch, cur
    out_launch = np.concatenate(launches)
    del launches
    return out_launch, np.concatenate(hits)


# the range columns attribution reads (of all_ranges' 13: 1.8M ranges)
RANGE_FIELDS = ("start_ns", "end_ns", "name", "domain", "style", "global_tid")


def attribute(
    trace: Trace,
    mode: Mode = "phase",
    phases: Sequence[str] | None = None,
    names: str = "demangled",
    exclusive: bool = False,
    range_columns: Sequence[str] = (),
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(launches, ranges, pairs): pairs has one row per (launch, range) credit, positional rows into
    launches and ranges (range -1: none). `phases`: the phase ranges' names; None: the export's own
    (analysis.joins.nvtx_ranges.phases_of). Phase mode and exclusive thread mode credit one range at most;
    inclusive thread mode credits every range open around the call on its thread. `ranges` has
    RANGE_FIELDS, pid in phase mode, and `range_columns` of all_ranges; in thread mode also parent_row
    (each range's parent row, -1: none), and the ranges' times and the launch calls' are taken out once
    searched (1.8M ranges and 1M calls: ~45 MB let go)."""
    _require(trace)
    if phases is None:
        phases = phases_of(trace) if mode != "thread" else ()
    launches = kernel_launches(trace, names=names).drop(columns=["correlation_id", "api_id"])
    # 1.8M ranges: what is read for them is let go unless loaded before (summary loads it for all tables)
    ranges = all_ranges(
        trace,
        keep=trace.holds("nvtx", ["start"]),
        columns=list(dict.fromkeys([*RANGE_FIELDS, *range_columns])),
    )
    if mode == "auto":
        mode = "phase" if ranges["name"].isin(list(phases)).any() else "thread"
    launches.attrs["mode"] = mode
    if mode == "thread":
        if (ranges["style"] != "PushPop").any():
            ranges = ranges[ranges["style"] == "PushPop"].reset_index(drop=True)
        inner, parent = _containing(ranges, launches, by_thread=True, point=False, release=True)
        ranges["parent_row"] = parent
        launch = np.arange(len(launches), dtype=np.int64)
        if not exclusive:
            launch, inner = _with_enclosing(parent, launch, inner)
        del parent
        launches.attrs["exclusive"] = exclusive
        return launches, ranges, pd.DataFrame({"launch": launch, "range": inner}, copy=False)
    if mode != "phase":
        raise ValueError(f"unknown mode {mode!r}: auto, phase or thread")
    if "pid" not in ranges:
        ranges["pid"] = pid_of(ranges["global_tid"].to_numpy())
    steps = measured_steps(ranges)
    phase_ranges = ranges[ranges["name"].isin(list(phases))].reset_index(drop=True)
    if not steps.empty:
        in_step, _ = _containing(steps.reset_index(drop=True), launches, by_thread=False, point=True)
        launches = launches[in_step >= 0].reset_index(drop=True)
        if lost := stepless_phases(ranges, steps, phase_ranges):
            lie, them = ("lies", "it") if lost == 1 else ("lie", "them")
            trace.note(
                f"{counted(lost, 'phase range')} inside the `measured` range {lie} in no measured step's "
                f"range (a `step` range lost, or never closed): the kernels launched in {them} are left out "
                "(`harness health` names the step)"
            )
    hit, _ = _containing(phase_ranges, launches, by_thread=False, point=True)
    launches.attrs["mode"] = "phase"
    return (
        launches,
        phase_ranges,
        pd.DataFrame({"launch": np.arange(len(launches)), "range": hit}, copy=False),
    )


def _range_codes(
    ranges: pd.DataFrame, by: str = "raw"
) -> tuple[np.ndarray, dict[int, tuple[str, str]], bool]:
    """An integer per range for its (printed name, style), the code -> (name, style) table, and whether
    the names carry PyTorch's per-call fields. Names are grouped as `by` says (analysis.nvtx_names)
    before the domain is put in front: PyTorch's ranges are in the default domain."""
    name, fields = grouped_categories(ranges["name"], by)
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
    return codes, table, fields


def _row_keys(
    rng: np.ndarray,
    launch: np.ndarray,
    r_group: np.ndarray,
    t_group: np.ndarray,
    n_r: int,
    name_code: np.ndarray,
    n_names: int,
    lo: int,
    hi: int,
) -> np.ndarray:
    """Rows of the credits lo:hi as one integer each: the range's row group, else (no range) the launching
    thread's after them (`n_r` row groups of ranges); times the kernel names plus the kernel's name code
    where rows are per kernel name."""
    rng, launch = rng[lo:hi], launch[lo:hi]
    part = np.where(rng >= 0, r_group[np.maximum(rng, 0)] if n_r else 0, n_r + t_group[launch])
    if len(name_code):
        part *= n_names
        part += name_code[launch]
    return part


NO_THREAD = -1  # the thread key of a kernel without its launching call


def _groups(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(group of each row, numbered in order of first appearance; first row of each group)."""
    if not len(df):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return group_ids(df, list(df.columns))


@dataclass
class _Credits:
    """Credits (launch, range) grouped into row groups (numbered in order of first appearance): per group
    the figures of its kernels' durations (a kernel once per row: nested ranges of one name), its range
    label code (-1: no range), PID, TID, kernel name id, range instances."""

    figures: list[tuple]  # stats.figures of each row group's durations, in group order
    label: np.ndarray
    pid: np.ndarray | pd.api.extensions.ExtensionArray  # <NA> for kernels without their call
    tid: np.ndarray | pd.api.extensions.ExtensionArray
    name_id: np.ndarray
    nvtx_inst: np.ndarray
    table: dict
    mode: str
    notes: list[str]


def _credits(
    trace: Trace,
    mode: Mode,
    phases: Sequence[str] | None,
    names: str,
    exclusive: bool,
    *,
    by_name: bool,
    by_thread: bool | None = None,
    ranged_only: bool = False,
    by: str = "raw",
) -> _Credits:
    """The credits of `attribute`, grouped into the rows of a table: by range label, PID and TID (the
    launching thread's where a kernel has no range; label only with by_thread=False), and kernel name
    with by_name. ranged_only (and phase mode) leaves out kernels under no range. Never a frame with a row
    per credit: inclusive thread mode makes several per kernel (6M for 1M kernels). Thread mode goes
    through the export once in time order where it can (analysis.joins.nvtx_sweep). `phases`: None, the
    export's own."""
    named: list[str] = []  # phases the caller named, none of them a range here: said, not passed over
    if phases is None and mode != "thread":
        phases = phases_of(trace)
    elif mode != "thread" and phases and trace.has("nvtx"):
        missing = [p for p in phases if not any_named(trace, [p])]
        said = f"no NVTX range is named {' or '.join(map(repr, missing))} in {trace.path.name}: "
        if mode == "auto" and len(missing) == len(phases):
            named.append(said + "each range credited on its thread instead (thread mode)")
        elif missing:  # a phase misspelt: its row 0, its kernels unattributed
            named.append(said + ("its row is 0" if len(missing) == 1 else "their rows are 0"))
    if mode == "phase" and not phases:  # an empty table, every kernel unattributed: said why
        named.append(
            f"no phase ranges in {trace.path.name} (`step` ranges and the ranges in them; --phases names "
            "others): every kernel is unattributed; --mode thread credits each range on its thread"
        )
    if mode == "auto" and trace.has("nvtx") and not any_named(trace, phases or ()):
        mode = "thread"  # what `attribute` decides where no range has a phase's name
    if mode == "thread" and by_thread is not False:
        swept = _swept(trace, names, exclusive, by_name=by_name, ranged_only=ranged_only, by=by)
        if swept is not None:
            swept.notes[:0] = named
            return swept
    launches, ranges, pairs = attribute(trace, mode, phases, names, exclusive)
    mode = launches.attrs["mode"]
    notes = [*named, *trace.notes, *launches.attrs.get("notes", [])]
    if by_thread is None:
        by_thread = mode == "thread"
    launch, rng = pairs["launch"].to_numpy(), pairs["range"].to_numpy()
    del pairs
    if ranged_only or mode == "phase":
        hit = rng >= 0
        launch, rng = launch[hit], rng[hit]
        del hit
    # What the rows need of the kernels: a thread key (PID in bits 24-47, TID below), name and duration;
    # the launch calls' columns go now (the attribution is done).
    n_launches = len(launches)
    l_key = thread_key(launches["global_pid"].to_numpy(), launches["global_tid"].to_numpy())
    # a kernel whose launching call is not in the export has no thread: those rows have no PID and TID,
    # across processes, as nvtxkernsum prints them (not the kernel's process with a made-up TID)
    l_key[~launches["has_call"].to_numpy()] = NO_THREAD
    kernel_name = launches["name_id"].to_numpy()
    kernel_duration = launches["duration"].to_numpy()
    if len(kernel_duration) and kernel_duration.min() >= 0 and kernel_duration.max() < 2**31:
        kernel_duration = kernel_duration.astype(np.int32)  # 4 bytes a credit (24M credits at 4M kernels)
    del launches
    # Ranges: a label code and a thread key each; the rows they make (label, with PID and TID by thread)
    n_ranges = len(ranges)
    codes, table, fields = _range_codes(ranges, by) if n_ranges else (np.zeros(0, dtype=np.int64), {}, False)
    notes[:0] = grouping_notes(fields, by)
    r_key = thread_key(ranges["global_tid"].to_numpy(), ranges["global_tid"].to_numpy())
    r_parent = ranges["parent_row"].to_numpy() if "parent_row" in ranges else np.zeros(0, dtype=np.int64)
    del ranges  # the caller's is gone too: 1.8M ranges are ~65 MB
    range_keys = {"label": codes, "thread": r_key} if by_thread else {"label": codes}
    r_group, r_first = _groups(pd.DataFrame(range_keys, copy=False))
    del range_keys
    nested_alike = _nested_alike(r_parent, r_group, mode, exclusive)
    del r_parent
    t_group, t_first = _groups(pd.DataFrame({"thread": l_key}, copy=False))
    n_r = len(r_first)
    n_names, name_code, name_ids = 1, np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    if by_name:
        name_code, name_ids = factorize(kernel_name)
        n_names = max(len(name_ids), 1)

    # The rows numbered in order of first appearance, a block of credits at a time: 6M credits in one
    # int64 array, and pandas' hash table sized for them, were the peak.
    keys_of = functools.partial(_row_keys, rng, launch, r_group, t_group, n_r, name_code, n_names)
    group, keys = factorize_blocks(len(rng), keys_of, BLOCK)
    del keys_of, r_group, t_group, name_code
    n_groups = len(keys)
    nvtx_inst = _distinct_ranges(group, rng, n_ranges, n_groups)
    del rng
    counts = np.ones(len(group), dtype=bool)
    if nested_alike and len(group):  # a kernel counts once per row
        pair = group.astype(np.int64) * n_launches + launch
        order = np.argsort(pair, kind="stable")
        pair = pair[order]
        twice = np.zeros(len(pair), dtype=bool)
        twice[1:] = pair[1:] == pair[:-1]
        del pair
        counts[order[twice]] = False
        del order
        if twice.any():
            notes.append(_nested_note(int(twice.sum())))
    # what each row group is
    base = keys // n_names
    in_range = base < n_r
    rep = np.where(in_range, r_first[np.minimum(base, max(n_r - 1, 0))] if n_r else 0, 0)
    rep_l = t_first[np.maximum(base - n_r, 0)] if len(t_first) else np.zeros(n_groups, dtype=np.int64)
    label = np.where(in_range, codes[rep] if n_r else -1, -1)
    thread = np.where(in_range, r_key[rep] if n_r else 0, l_key[rep_l] if len(l_key) else 0)
    pid, tid = _pid_tid(thread)
    if not counts.all():
        launch, group = launch[counts], group[counts]
    duration = kernel_duration[launch]
    del launch
    return _Credits(
        figures=_group_figures(group, duration),
        label=label,
        pid=pid,
        tid=tid,
        name_id=np.asarray(name_ids)[keys % n_names] if by_name else np.zeros(n_groups, dtype=np.int64),
        nvtx_inst=nvtx_inst,
        table=table,
        mode=mode,
        notes=notes,
    )


def _nested_note(twice: int) -> str:
    return (
        f"{counted(twice, 'kernel')} ran inside nested NVTX ranges of the same name; each is counted once "
        "per range name (nsys stats counts it once per range)"
    )


def _pid_tid(thread: np.ndarray) -> tuple[np.ndarray | pd.api.extensions.ExtensionArray, ...]:
    """PID and TID of thread keys; nullable, <NA> for NO_THREAD, where a kernel had no launch call."""
    pid, tid = pid_of(thread), tid_of(thread)
    if (thread == NO_THREAD).any():
        pid, tid = pd.array(pid, dtype="Int64"), pd.array(tid, dtype="Int64")
        pid[thread == NO_THREAD] = pd.NA
        tid[thread == NO_THREAD] = pd.NA
    return pid, tid


def _group_figures(group: np.ndarray, duration: np.ndarray) -> list[tuple]:
    """stats.figures of each group's durations, in group order: the durations split by group a block of
    credits at a time (analysis.stats.durations_by_group), not an int64 order of every credit (24M credits
    at 4M kernels: 192 MB)."""
    blocks = (
        {"g": group[lo : lo + BLOCK], "duration": duration[lo : lo + BLOCK]}
        for lo in range(0, len(group), BLOCK)
    )
    stats = [(g, figures(values)) for (g,), values in durations_by_group(blocks, ["g"])]
    stats.sort(key=lambda item: item[0])
    return [f for _, f in stats]


def _swept(
    trace: Trace, names: str, exclusive: bool, *, by_name: bool, ranged_only: bool, by: str
) -> _Credits | None:
    """`_credits` in thread mode by one pass over time (analysis.joins.nvtx_sweep); None where the export is
    not
    in the order it needs. The NVTX ranges go to the cache first where there is one (read whole from an
    export, then a block at a time from the cache)."""
    _require(trace)
    trace.stage({"nvtx": RANGE_READ})
    try:
        swept = thread_sweep(trace, names, exclusive, by_name=by_name, ranged_only=ranged_only, by=by)
    except Unordered:
        return None
    for text in swept.notes:
        trace.note(text)
    notes = [*grouping_notes(swept.fields, by), *trace.notes]
    if swept.twice:
        notes.append(_nested_note(swept.twice))
    pid, tid = _pid_tid(swept.thread)
    return _Credits(
        figures=swept.figures,
        label=swept.label,
        pid=pid,
        tid=tid,
        name_id=swept.name_id if by_name else np.zeros(len(swept.label), dtype=np.int64),
        nvtx_inst=swept.nvtx_inst,
        table=swept.table,
        mode="thread",
        notes=notes,
    )


def _distinct_ranges(group: np.ndarray, rng: np.ndarray, n_ranges: int, n_groups: int) -> np.ndarray:
    """NVTX Inst: how many distinct ranges (-1, none, counts as one) each row group's credits have. The
    (group, range) pairs are made and counted a slice of the ranges at a time, about 2M credits each:
    one int64 pair per credit, sorted at once, was the peak at 4M kernels (24M credits: ~220 MB)."""
    out = np.zeros(n_groups, dtype=np.int64)
    span = n_ranges + 1  # rng + 1 is in [0, n_ranges]
    parts = max(1, -(-len(rng) // (1 << 21)))
    step = -(-span // parts)
    for lo in range(-1, n_ranges, step):
        inside = rng >= lo
        inside &= rng < lo + step
        pair = group[inside].astype(np.int64)
        pair *= span
        pair += rng[inside]
        pair += 1
        del inside
        pair.sort()  # in place: np.unique holds copies
        distinct = np.ones(len(pair), dtype=bool)
        distinct[1:] = pair[1:] != pair[:-1]
        out += np.bincount(pair[distinct] // span, minlength=n_groups)
        del pair, distinct
    return out


def _nested_alike(parent: np.ndarray, r_group: np.ndarray, mode: str, exclusive: bool) -> bool:
    """Whether a kernel can be credited twice to one row: inclusive thread mode, and a range inside one
    of the same row group (name, PID, TID); `parent` is each range's parent row (-1: none). Most exports
    have none, and then no 6M-credit sort is needed."""
    if mode != "thread" or exclusive or not len(parent):
        return False
    for lo in range(0, len(parent), BLOCK):  # walk up from a block of ranges at a time
        todo = np.flatnonzero(parent[lo : lo + BLOCK] >= 0) + lo
        anc = parent[todo]
        while len(todo):
            if (r_group[anc] == r_group[todo]).any():
                return True
            anc = parent[anc]
            up = anc >= 0
            todo, anc = todo[up], anc[up]
    return False
