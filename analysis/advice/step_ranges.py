"""The NVTX steps check's judgement of the step ranges themselves (analysis.advice.coverage.nvtx_steps): a
step's range must last some time, be the only one of its number, follow the step before it and end before
the next one starts, and hold its phase ranges. A range that breaks any of these is a damaged or edited
export: the steps' times, the gaps between them and every finding per step would be drawn from it.

Where a step range and its phases disagree it fails naming the step; where two step ranges do, both."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from analysis.advice.checks import FAIL, Check
from analysis.advice.steps import KINETO_SLACK_NS, Steps, seconds, unheld
from analysis.readers import NULL
from analysis.trace.trace import Trace
from workloads.names import ALL_PHASES, STEP

NAME = "NVTX steps"
FIX_UNHELD = (
    "a step's range and its phase ranges disagree (a program opens and closes a step's phases inside it): a "
    "damaged or edited export. The steps' times, the gaps between them and every finding per step cannot be "
    "trusted: export the report again"
)
FIX_CROSSED = (
    "push/pop ranges of one thread nest (a pop closes the latest push): two that cross are a damaged or "
    "edited export. The split by phase would count their overlap twice: export the report again"
)
FIX_OPEN = (
    "a range's end was not recorded while the program went on (an NVTX event lost): the steps' times, the "
    "gaps between them and every finding per step cannot be trusted. Capture again"
)
FIX_RANGES = (
    "the step ranges contradict what a program records (each step once, after the one before it, ending "
    "before the next starts): a damaged or edited export. The steps' times, the gaps between them and every "
    "finding per step cannot be trusted: export the report again"
)


def steps_said(steps: list[int]) -> str:
    """`step 3`, `steps 3, 4`, `steps 3–14`, `steps 1, 3, 5, …`."""
    if len(steps) == 1:
        return f"step {steps[0]}"
    if steps == list(range(steps[0], steps[-1] + 1)) and len(steps) > 2:
        return f"steps {steps[0]}–{steps[-1]}"
    return "steps " + ", ".join(map(str, steps[:8])) + (", …" if len(steps) > 8 else "")


def among(measured: list[int], has_measured: bool) -> Callable[[list[int]], str]:
    """How some of the measured steps are said: counted against all of them and named by their numbers, so
    that the count and the numbers cannot disagree: `2 of 10 measured steps (steps 6, 9 of steps 5–14)`."""
    kind = "measured steps" if has_measured else "steps"

    def which(steps: list[int]) -> str:
        named = steps_said(steps) if steps == measured else f"{steps_said(steps)} of {steps_said(measured)}"
        return f"{len(steps)} of {len(measured)} {kind} ({named})"

    return which


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


def _more(n: int, what: str) -> str:
    return f" ({n:,} {what} in all)" if n > 1 else ""


def ranges_check(trace: Trace, st: Steps, zero: int) -> Check | None:
    """A failed check for the first of these found, in this order: a measured step's range that lasts no
    time; a step number with two ranges of one name in a process; step ranges of a process out of the order
    of their numbers, or overlapping on one thread (a measured step among the two); a measured step whose
    range does not hold its phase ranges; a measured harness step whose phase ranges overlap or run out of the
    order the harness runs them in; a phase range that lies in no step range where the step beside it lacks
    a range of that name the other steps have (a range moved out of its step). None: none of these."""
    r = st.ranges
    if r is None or r.empty or st.frame.empty:
        return None
    slack = 0 if trace.format == "nsys-sqlite" else KINETO_SLACK_NS
    measured = {(int(p), int(s)) for p, s in st.frame.loc[st.frame["measured"], ["pid", "step"]].to_numpy()}
    own = r[r["name"] == STEP].sort_values("start", kind="stable")
    keys = list(zip(own["pid"].astype(int), own["step"].astype(int), strict=True))
    own = own.assign(measured=[k in measured for k in keys])
    open_from = _open_from(trace, st)
    if said := _never_ends(own, open_from, zero):
        return Check(NAME, FAIL, said, FIX_OPEN)
    for said in (_lasting(own, zero), _twice(r, zero), _disordered(own, zero, slack)):
        if said:
            return Check(NAME, FAIL, said, FIX_RANGES)
    if broken := unheld_check(trace, st, zero):
        return broken
    if st.source == "harness" and (said := _phases_disordered(r, measured, zero, open_from)):
        return Check(NAME, FAIL, said, FIX_UNHELD)
    if st.source != "harness" and (said := _displaced(r, own, zero)):
        return Check(NAME, FAIL, said, FIX_UNHELD)
    if st.source != "harness" and trace.format == "nsys-sqlite" and (said := _crossed(trace, st, own, zero)):
        return Check(NAME, FAIL, said, FIX_CROSSED)
    return None


def _crossed(trace: Trace, st: Steps, own: pd.DataFrame, zero: int) -> str | None:
    """Of a capture whose phases are the program's own ranges, two push/pop phase ranges of one thread in a
    step range of it that cross: the later starts inside the earlier and ends after it. A thread's push/pop
    ranges nest (a pop closes the latest push), so they cannot; start/end ranges may overlap, and are not
    held to it. A range that ends at the trace's last NVTX time or the capture's end may never have ended."""
    r = st.ranges
    assert r is not None
    phases = r[(r["name"] != STEP) & r["pushpop"].astype(bool) & (r["end"] < _open_from(trace, st))]
    found = []
    for tid, ps in phases.groupby("tid", sort=False):
        ss = own[own["tid"] == tid]
        stack: list[tuple[int, int, str]] = []  # (end, start, name) of the ranges open
        for p in ps.sort_values(["start", "end"], ascending=[True, False], kind="stable").itertuples():
            while stack and stack[-1][0] <= p.start:
                stack.pop()
            if stack and p.end > stack[-1][0]:
                end, start, name = stack[-1]
                holder = ss[(ss["start"] <= p.start) & (p.start < ss["end"])]
                if len(holder):
                    found.append((p.start, int(holder["step"].iloc[0]), name, start, end, p.name))
            stack.append((p.end, p.start, p.name))
    if not found:
        return None
    at, step, a, a_start, a_end, b = min(found)
    said = (
        f"step {step}'s {a} and {b} ranges cross on one thread: its {b} range starts at {seconds(at, zero)}, "
        f"{_ms(a_end - at)} before its {a} range (from {seconds(a_start, zero)}) ends, and ends after it"
    )
    return said + _more(len(found), "crossing pairs of phase ranges")


def inverted_check(trace: Trace, st: Steps, zero: int) -> Check | None:
    """A failed check naming the first step range (or harness phase range of a measured step) that ends before
    it starts: the reader leaves such a row out as one that cannot be right, so the steps would be read
    without it (a plain capture's steps counted one short, a harness step as one whose range was lost).
    A plain step range is numbered by its place in time among the step ranges; None: there is none."""
    if not trace.has("nvtx"):
        return None
    ok = trace.rows_ok("nvtx", ["start", "end"])
    if ok.all():
        return None
    bad = ~ok
    start, end = (np.asarray(trace.column("nvtx", c, bad, keep=False)) for c in ("start", "end"))
    names = np.asarray(trace.column("nvtx", "name", bad, keep=False), dtype=object)
    payload = pd.array(trace.column("nvtx", "payload", bad, keep=False), dtype="Float64")
    named = np.isin(names, [STEP, *ALL_PHASES]) & (start != NULL) & (end != NULL) & (end < start)
    found = []
    f = st.frame
    warm = {int(s) for s in f.loc[~f["measured"].astype(bool), "step"]} if st.source == "harness" else set()
    for i in np.flatnonzero(named):
        name, number = str(names[i]), payload[i]
        if st.source == "harness" and not pd.isna(number):
            if int(number) in warm:
                continue
            who = f"step {int(number)}'s {'' if name == STEP else name + ' '}range"
        elif name == STEP and st.source in ("step ranges", ""):
            who = f"step {int(np.searchsorted(np.sort(f['start'].to_numpy()), start[i]))}'s range"
        else:
            who = f"the {name} range from {seconds(int(start[i]), zero)}"
        found.append((int(start[i]), who, int(end[i])))
    if not found:
        return None
    at, who, to = min(found)
    said = (
        f"{who} ends at {seconds(to, zero)}, {_ms(at - to)} before it starts: a range that cannot be right, "
        "left out of every table, so the steps are read without it"
    )
    return Check(NAME, FAIL, said + _more(len(found), "step and phase ranges ending before they start"),
                 FIX_RANGES)  # fmt: skip


def broken_steps(trace: Trace, st: Steps) -> list[tuple[int, int]]:
    """(step, start) of the measured steps whose own range lasts no time or does not hold their phase ranges,
    in time order: what lies in such a range is not the step's work, so a check per step cannot judge it."""
    f = st.frame
    if f.empty:
        return []
    if st.source == "harness":
        own = f["phases"].map(lambda p: STEP in p).to_numpy()
    else:
        own = np.ones(len(f), dtype=bool)
    lasting = f[f["measured"].to_numpy() & own & (f["end"] <= f["start"]).to_numpy()]
    found = {(int(s), int(t)) for s, t in zip(lasting["step"], lasting["start"], strict=True)}
    held = unheld(trace, st)
    found |= {(int(s), int(t)) for s, t in zip(held["step"], held["step_start"], strict=True)}
    return sorted(found, key=lambda k: (k[1], k[0]))


def _open_from(trace: Trace, st: Steps) -> int:
    """From when a range's end may be the one the reader gives a range never closed: the trace's last NVTX
    time, or the capture's end where it comes first."""
    capture_end = trace.meta.get("capture_end_ns")
    return min(st.last, capture_end) if isinstance(capture_end, int) else st.last


def _never_ends(own: pd.DataFrame, open_from: int, zero: int) -> str | None:
    """A measured step's range that never ends (its end is the trace's last NVTX time or the capture's end)
    while a later step range of its process starts after it: its end was lost, not the program stopped in
    it (a run stopped in a step records no step after it)."""
    found = []
    for _, g in own.groupby("pid", sort=False):
        for a in g[g["measured"] & (g["end"] >= open_from)].itertuples():
            later = g[g["start"] > a.start]
            if len(later):
                found.append((a.start, int(a.step), int(a.end), later.iloc[0]))
    if not found:
        return None
    _, step, end, b = min(found, key=lambda f: f[0])
    said = (
        f"step {step}'s range never ends (its time runs to the trace's end, {seconds(end, zero)}) while step "
        f"{int(b['step'])}'s range starts after it, at {seconds(int(b['start']), zero)}: its end was lost"
    )
    return said + _more(len(found), "step ranges that never end")


def _lasting(own: pd.DataFrame, zero: int) -> str | None:
    """A measured step's range that ends where it starts, or before."""
    bad = own[own["measured"] & (own["end"] <= own["start"])]
    if bad.empty:
        return None
    first = bad.iloc[0]
    step, start, end = int(first["step"]), int(first["start"]), int(first["end"])
    said = (
        f"step {step}'s range lasts no time: it starts and ends at {seconds(start, zero)}"
        if end == start
        else f"step {step}'s range ends at {seconds(end, zero)}, {_ms(start - end)} before it starts"
    )
    return said + _more(len(bad), "step ranges that last no time")


def _twice(r: pd.DataFrame, zero: int) -> str | None:
    """A step number with two (or more) ranges of one name (`step`, or a phase of a harness step) in one
    process: the harness records each once, and ProfilerStep#N numbers each step once."""
    numbered = r[r["step"] >= 0]
    sizes = numbered.groupby(["pid", "step", "name"], sort=False).size()
    twice = sizes[sizes > 1]
    if twice.empty:
        return None
    firsts = numbered.groupby(["pid", "step", "name"], sort=False)["start"].min()[twice.index]
    pid, step, name = firsts.sort_values().index[0]
    starts = numbered[(numbered["pid"] == pid) & (numbered["step"] == step) & (numbered["name"] == name)]
    at = sorted(seconds(s, zero) for s in starts["start"])
    said = (
        f"step {int(step)} has {len(at)} {name} ranges in one process, from {', '.join(at[:-1])} and {at[-1]}"
    )
    steps = twice.index.droplevel("name").unique()
    return said + _more(len(steps), "step numbers recorded more than once")


def _disordered(own: pd.DataFrame, zero: int, slack: int) -> str | None:
    """Step ranges of one process whose numbers go down in time, then step ranges of one thread of which
    the next starts before the one before it ends; pairs of warm-up steps aside."""
    pairs = []
    for key in ("pid", "tid"):
        for _, g in own.groupby(key, sort=False):
            a, b = g.iloc[:-1], g.iloc[1:]
            checked = a["measured"].to_numpy() | b["measured"].to_numpy()
            if key == "pid":
                bad = checked & (b["step"].to_numpy() < a["step"].to_numpy())
            else:
                bad = checked & (b["start"].to_numpy() < a["end"].to_numpy() - slack)
            pairs += [(key, x, y) for x, y, h in zip(a.itertuples(), b.itertuples(), bad, strict=True) if h]
        if pairs:
            break
    if not pairs:
        return None
    kind, a, b = min(pairs, key=lambda p: p[2].start)
    if kind == "pid":
        said = (
            f"the step ranges are out of order: step {a.step}'s range starts at {seconds(a.start, zero)}, "
            f"before step {b.step}'s (at {seconds(b.start, zero)})"
        )
        return said + _more(len(pairs), "steps out of order")
    said = (
        f"step ranges overlap: step {b.step}'s range starts at {seconds(b.start, zero)}, "
        f"{_ms(a.end - b.start)} before step {a.step}'s range ends"
    )
    return said + _more(len(pairs), "overlapping pairs")


def unheld_check(trace: Trace, st: Steps, zero: int) -> Check | None:
    """A failed check naming the measured steps whose range does not hold their phase ranges, the first of
    them and the phase of it that reaches furthest past it (or, where the range holds none of them, the
    phase nearest it); None: every step holds its phases."""
    found = unheld(trace, st)
    if found.empty:
        return None
    first = found[(found["step"] == found["step"].iloc[0]) & (found["pid"] == found["pid"].iloc[0])]
    worst = first.loc[first[["before", "after"]].max(axis=1).idxmax()]
    step, phase = int(worst["step"]), worst["phase"]
    ends = worst["after"] >= worst["before"]
    at, by = (worst["step_end"], worst["after"]) if ends else (worst["step_start"], worst["before"])
    said = f"{'ends' if ends else 'starts'} at {seconds(at, zero)}, {by / 1e6:,.3f} ms "
    said += f"before its {phase} range ends" if ends else f"after its {phase} range starts"
    if st.source == "harness" and (none := _holds_none(st, worst, zero)):
        said = none
    steps = sorted({int(s) for s in found["step"]})
    which = among(
        st.frame.loc[st.frame["measured"], "step"].astype(int).tolist(), st.has_measured or st.by_record
    )
    one = len(steps) == 1
    held = f"the range{'' if one else 's'} of {which(steps)} {'does' if one else 'do'} not hold "
    evidence = f"{held}{'its' if one else 'their'} phase ranges: step {step}'s range {said}"
    return Check(NAME, FAIL, evidence, FIX_UNHELD)


def _holds_none(st: Steps, worst: pd.Series, zero: int) -> str | None:
    """Of a harness step whose range holds none of its phase ranges (they all lie after it, or before it),
    how: `ends at 19.028 s, 0.001 ms before its first phase range (forward) starts: it holds none of them`."""
    r = st.ranges
    assert r is not None
    mine = r[(r["pid"] == worst["pid"]) & (r["step"] == worst["step"]) & (r["name"] != STEP)]
    start, end = int(worst["step_start"]), int(worst["step_end"])
    if mine.empty or not ((mine["start"] >= end) | (mine["end"] <= start)).all():
        return None
    if (mine["start"] >= end).all():
        first = mine.loc[mine["start"].idxmin()]
        gap = _ms(int(first["start"]) - end)
        return (
            f"ends at {seconds(end, zero)}, {gap} before its first phase range ({first['name']}) starts: it "
            "holds none of them"
        )
    last = mine.loc[mine["end"].idxmax()]
    gap = start - int(last["end"])
    return (
        f"starts at {seconds(start, zero)}, {_ms(gap)} after its last phase range ({last['name']}) ends: "
        "it holds none of them"
    )


def _phases_disordered(
    r: pd.DataFrame, measured: set[tuple[int, int]], zero: int, open_from: int
) -> str | None:
    """Of a measured harness step, two phase ranges one after the other in time that overlap (the harness
    opens each phase after the one before it closed, on one thread; said as the first never ending where its
    end is the trace's), or whose names come in another order than the harness runs them (forward, backward,
    optimizer; prefill, decode)."""
    order = {name: i for i, name in enumerate(ALL_PHASES)}
    phases = r[(r["name"] != STEP) & r["name"].isin(list(order))].sort_values("start", kind="stable")
    found = []
    for (pid, step), g in phases.groupby(["pid", "step"], sort=False):
        if (int(pid), int(step)) not in measured or len(g) < 2:
            continue
        for a, b in zip(g.iloc[:-1].itertuples(), g.iloc[1:].itertuples(), strict=True):
            if b.start < a.end and a.end >= open_from:
                found.append((b.start, f"step {step}'s {a.name} range never ends (its time runs to the "
                              f"trace's end, {seconds(a.end, zero)}) while its {b.name} range starts after "
                              f"it, at {seconds(b.start, zero)}: its end was lost"))  # fmt: skip
            elif b.start < a.end:
                found.append((b.start, f"step {step}'s {a.name} and {b.name} ranges overlap: its {b.name} "
                              f"range starts at {seconds(b.start, zero)}, {_ms(a.end - b.start)} before its "
                              f"{a.name} range ends"))  # fmt: skip
            elif order[b.name] < order[a.name]:
                found.append((b.start, f"step {step}'s phase ranges are out of order: its {a.name} range "
                              f"(from {seconds(a.start, zero)}) comes before its {b.name} range (from "
                              f"{seconds(b.start, zero)})"))  # fmt: skip
    if not found:
        return None
    return min(found)[1] + _more(len(found), "such pairs of phase ranges")


def _displaced(r: pd.DataFrame, own: pd.DataFrame, zero: int) -> str | None:
    """Of step ranges numbered by time (plain `step` ranges, ProfilerStep#N), where phases belong to a step
    by lying in it: a phase range in no step range of its thread, where a step beside it (the one before
    it, else the one after) has no range of that name while another step of the thread has one. A phase
    range beside steps that have their own (an evaluation pass between training steps) is a program's."""
    phases = r[r["name"] != STEP]
    found = []
    for tid, ps in phases.groupby("tid", sort=False):
        ss = own[own["tid"] == tid]
        if ss.empty:
            continue
        s_start, s_end = ss["start"].to_numpy(), ss["end"].to_numpy()
        held = [set() for _ in range(len(ss))]
        for p in ps.itertuples():
            inside = np.flatnonzero((s_start < p.end) & (p.start < s_end))
            for i in inside:
                held[i].add(p.name)
        for p in ps.itertuples():
            if ((s_start < p.end) & (p.start < s_end)).any() or not any(p.name in h for h in held):
                continue
            prev, after = np.flatnonzero(s_end <= p.start), np.flatnonzero(s_start >= p.end)
            beside = [(i, "after") for i in prev[-1:]] + [(i, "before") for i in after[:1]]
            for i, where in beside:
                if p.name not in held[i]:
                    found.append((p.start, p.name, where, int(ss["step"].iloc[i])))
                    break
    if not found:
        return None
    start, name, where, step = min(found)
    return (
        f"the {name} range from {seconds(start, zero)} lies in no step range, {where} step {step}'s, and "
        f"step {step} holds no {name} range while other steps hold one (the range of step {step} or of that "
        f"{name} was moved)" + _more(len(found), "phase ranges in no step")
    )
