"""The steps of a capture, as the health checks over time read them (analysis.advice.coverage): the
harness's `step` ranges (their int64 payload is the step index; a step whose `step` range was lost is still
known from its phase ranges' payload), Kineto's `ProfilerStep#N`, or plain `step` ranges numbered in order;
which are measured (inside the harness's `measured` range; without one, those after the run's warm-up
steps where its record tells them, else all); and the capture's clock for
the times said to people (`seconds`, from analysis.views.timeline.time_zero)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.advice.labels import label_codes, label_test
from analysis.readers.global_ids import PROCESS_MASK
from analysis.readers.kineto_build import STEP_RE
from analysis.trace.trace import Trace
from workloads.names import ALL_PHASES, MEASURED, STEP

UNKNOWN_WARMUP = (
    "no `measured` range (lost with the NVTX ranges) and no run's record: which steps were warm-up is not "
    "known, so every step is checked, warm-up ones too"
)


def seconds(ns: float, zero: int) -> str:
    return f"{(ns - zero) / 1e9:,.3f} s"


@dataclass
class Steps:
    """The steps of a trace: a frame of step, start, end, pid, measured, phases (the harness phase ranges it
    has, with `step` itself when its step range is there), and where they come from."""

    frame: pd.DataFrame
    source: str  # "harness" (payloads), "ProfilerStep", "step ranges", or "" (none)
    has_measured: bool = False
    nvtx_end: int = 0  # the end of the last harness range (step, phase or measured)
    spans: list[tuple[int, int, int]] | None = None  # the `measured` ranges: start, end, pid
    # the harness's steps without a `measured` range (lost with NVTX): the run's warm-up count told which
    # were measured (True), or nothing did and every step counts (False)
    by_record: bool = False
    # the step ranges and the phase ranges (start, end, pid, tid, name, step, pushpop; a phase's step is its
    # payload in a harness capture, -1 where no payload tells it), what `unheld` lines up
    ranges: pd.DataFrame | None = None
    last: int = 0  # the trace's last NVTX time: the end the reader gives a range never closed

    @property
    def warmup_unknown(self) -> bool:
        """A harness capture whose `measured` range is missing, with no run's record to tell its warm-up
        steps: every step is checked, the warm-up ones among them."""
        return self.source == "harness" and not self.has_measured and not self.by_record


def steps(trace: Trace, warmup: int | None = None) -> Steps:
    """The trace's steps; `warmup`: the run's warm-up steps (the harness numbers them 0…warmup−1), which tell
    the measured steps where the `measured` range is missing (0 or None: not told; a `profile` run's
    record has none, its steps being the program's)."""
    empty = pd.DataFrame({"step": [], "start": [], "end": [], "pid": [], "measured": [], "phases": []})
    if not trace.has("nvtx"):
        return Steps(empty, "")
    nv = trace.frame("nvtx", ["start", "end", "global_tid", "name", "payload", "domain", "pushpop"])
    gpu_side = label_test(nv["domain"], lambda labels: labels == "GPU")  # Kineto's GPU-side copies
    if gpu_side.any():
        nv = nv[~gpu_side]
    codes, labels = label_codes(nv["name"])  # names are matched once each, not once per range
    last = int(max(nv["start"].max(), nv["end"].max())) if len(nv) else 0
    pid = nv["global_tid"].to_numpy() & PROCESS_MASK
    numbers = pd.Series(labels, dtype=object).str.extract(STEP_RE.pattern, expand=False)
    kineto = np.append(numbers.notna().to_numpy(), False)[codes]

    def named(wanted: set[str]) -> np.ndarray:
        return np.append(np.array([n in wanted for n in labels], dtype=bool), False)[codes]

    def ranges(rows: np.ndarray, step: np.ndarray) -> pd.DataFrame:
        """The step ranges `rows` (numbered `step`) and every phase range, as `Steps.ranges` holds them."""
        phases = named(set(ALL_PHASES)) & ~rows
        return pd.DataFrame(
            {
                "start": nv["start"].to_numpy()[rows | phases],
                "end": nv["end"].to_numpy()[rows | phases],
                "pid": pid[rows | phases],
                "tid": nv["global_tid"].to_numpy()[rows | phases],
                "name": np.where(rows, STEP, labels.to_numpy(dtype=object)[codes])[rows | phases],
                "step": _placed(step, rows)[rows | phases],
                "pushpop": nv["pushpop"].to_numpy(dtype=bool)[rows | phases],
            }
        )

    if kineto.any():
        ks = nv[kineto]
        frame = pd.DataFrame(
            {
                "step": np.append(numbers.fillna("-1").astype(np.int64).to_numpy(), -1)[codes][kineto],
                "start": ks["start"].to_numpy(),
                "end": ks["end"].to_numpy(),
                "pid": pid[kineto],
                "measured": True,
                "phases": [frozenset({STEP})] * len(ks),
            }
        )
        return Steps(
            frame.sort_values("start").reset_index(drop=True), "ProfilerStep", nvtx_end=int(ks["end"].max()),
            ranges=ranges(kineto, frame["step"].to_numpy()), last=last,
        )  # fmt: skip

    harness = named({STEP, *ALL_PHASES}) & nv["payload"].notna().to_numpy()
    measured = nv[named({MEASURED})]
    if harness.any():
        hs = nv[harness].assign(pid=pid[harness], name=labels.to_numpy(dtype=object)[codes[harness]])
        hs = hs.assign(step=hs["payload"].astype(np.int64))
        frame = _per_step(hs)
        inside = np.zeros(len(frame), dtype=bool)
        pids = measured["global_tid"].to_numpy() & PROCESS_MASK
        for s, e, p in zip(measured["start"], measured["end"], pids, strict=True):
            inside |= (
                (frame["pid"].to_numpy() == p)
                & (frame["start"].to_numpy() >= s)
                & (frame["start"].to_numpy() < e)
            )
        by_record = not len(measured) and bool(warmup)  # 0: a program's record tells no warm-up
        frame["measured"] = inside if len(measured) else frame["step"] >= warmup if by_record else True
        ends = [int(hs["end"].max()), *(int(e) for e in measured["end"])]
        frame = frame.sort_values("start").reset_index(drop=True)[
            ["step", "start", "end", "pid", "measured", "phases"]
        ]
        spans = list(zip(measured["start"].astype(np.int64), measured["end"].astype(np.int64),
                         measured["global_tid"].to_numpy() & PROCESS_MASK, strict=True))  # fmt: skip
        held = hs[["start", "end", "pid", "global_tid", "name", "step", "pushpop"]].rename(
            columns={"global_tid": "tid"}
        )
        return Steps(
            frame, "harness", has_measured=bool(len(measured)), nvtx_end=max(ends), spans=spans,
            by_record=by_record, ranges=held.reset_index(drop=True), last=last,
        )  # fmt: skip
    plain_rows = named({STEP})
    plain = nv[plain_rows].sort_values("start")
    if plain.empty:
        return Steps(empty, "")
    numbered = np.argsort(plain.index.to_numpy())  # each step range's place in time, in the frame's order
    frame = pd.DataFrame(
        {
            "step": np.arange(len(plain), dtype=np.int64),
            "start": plain["start"].to_numpy(),
            "end": plain["end"].to_numpy(),
            "pid": plain["global_tid"].to_numpy() & PROCESS_MASK,
            "measured": True,
            "phases": [frozenset({STEP})] * len(plain),
        }
    )
    return Steps(
        frame, "step ranges", nvtx_end=int(plain["end"].max()), ranges=ranges(plain_rows, numbered), last=last
    )


UNHELD_COLUMNS = ["step", "pid", "phase", "step_start", "step_end", "before", "after"]
# a Kineto trace's times are microseconds, rounded to whole nanoseconds one event at a time
KINETO_SLACK_NS = 1_000


def unheld(trace: Trace, st: Steps) -> pd.DataFrame:
    """The phase ranges of measured steps that their step range does not hold: step, pid, phase, step_start,
    step_end, before (how long the phase starts before its step's range, ns; 0 where it does not), after
    (how long it ends after it), in the order of the steps. A harness phase belongs to the step of its payload
    (a step without its `step` range holds nothing to line up); elsewhere a phase range that overlaps a step
    range of its thread in part: push/pop ranges of one thread nest, so a phase that starts inside a step and
    ends after it (or starts before and ends inside) is a range whose times are wrong. A phase that ends at
    the trace's last NVTX time or the capture's end may never have ended (the open ranges check says so): its
    end is not a time to hold a step against."""
    r = st.ranges
    if r is None or r.empty or st.frame.empty:
        return pd.DataFrame(columns=UNHELD_COLUMNS)
    capture_end = trace.meta.get("capture_end_ns")
    open_from = min(st.last, capture_end) if isinstance(capture_end, int) else st.last
    phases, own = r[(r["name"] != STEP) & (r["end"] < open_from)], r[r["name"] == STEP]
    measured = st.frame[st.frame["measured"]]
    if st.source == "harness":
        measured = measured[measured["phases"].map(lambda p: STEP in p).astype(bool)]
        pairs = phases.merge(
            measured[["step", "pid", "start", "end"]], on=["step", "pid"], suffixes=("", "_step")
        )
    else:
        pairs = _straddling(phases, own).merge(measured[["step", "pid"]], on=["step", "pid"])
    found = pairs.assign(
        before=(pairs["start_step"] - pairs["start"]).clip(lower=0),
        after=(pairs["end"] - pairs["end_step"]).clip(lower=0),
    )
    slack = 0 if trace.format == "nsys-sqlite" else KINETO_SLACK_NS
    found = found[(found["before"] > slack) | (found["after"] > slack)]
    out = found.rename(columns={"name": "phase", "start_step": "step_start", "end_step": "step_end"})
    return out.sort_values(["step_start", "pid", "start"])[UNHELD_COLUMNS].reset_index(drop=True)


def _straddling(phases: pd.DataFrame, own: pd.DataFrame) -> pd.DataFrame:
    """Each phase range with the step range of its thread (start_step, end_step, step) it overlaps in part:
    the step it starts in when it ends after that step's end, and the step that starts inside it when it
    ends before that step's end (a phase that holds a whole step nests, as push/pop ranges do)."""
    rows = []
    for tid, ps in phases.groupby("tid"):
        ss = own[own["tid"] == tid].sort_values("start")
        if ss.empty:
            continue
        s_start, s_end = ss["start"].to_numpy(), ss["end"].to_numpy()
        p_start, p_end = ps["start"].to_numpy(), ps["end"].to_numpy()
        before = np.searchsorted(s_start, p_start, side="right")  # the first step to start after it
        started = np.maximum(before - 1, 0)  # the last step to start at or before it
        cut = (before > 0) & (p_start < s_end[started]) & (p_end > s_end[started])
        later = np.minimum(before, len(ss) - 1)
        late = (before < len(ss)) & (s_start[later] < p_end) & (p_end < s_end[later])
        for hit, at in ((cut, started[cut]), (late, later[late])):
            step = ss["step"].to_numpy()[at]
            rows.append(ps[hit].assign(step=step, start_step=s_start[at], end_step=s_end[at]))
    if not rows:
        return phases.iloc[:0].assign(start_step=0, end_step=0)
    return pd.concat(rows, ignore_index=True)


def _placed(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """`values` (one per row where `rows` is True) spread over every row, -1 elsewhere."""
    out = np.full(len(rows), -1, dtype=np.int64)
    out[rows] = values
    return out


def _per_step(hs: pd.DataFrame) -> pd.DataFrame:
    """The harness's ranges (start, end, pid, name, step) per process and step, in that order: step, start,
    end (of its `step` range, else of its phase ranges together), pid, phases (the names it has)."""
    pid, step = hs["pid"].to_numpy(), hs["step"].to_numpy()
    order = np.lexsort((step, pid))
    pid, step = pid[order], step[order]
    first = np.flatnonzero(np.concatenate(([True], (pid[1:] != pid[:-1]) | (step[1:] != step[:-1]))))
    start, end = hs["start"].to_numpy()[order], hs["end"].to_numpy()[order]
    names = hs["name"].to_numpy(dtype=object)[order]
    own = names == STEP
    has = np.logical_or.reduceat(own, first)
    # a group's `step` range where it has one: the others stand aside as the latest start, the earliest end
    own_start = np.minimum.reduceat(np.where(own, start, start.max()), first)
    own_end = np.maximum.reduceat(np.where(own, end, end.min()), first)
    bounds = [first, [*first[1:], len(names)]]
    return pd.DataFrame(
        {
            "step": step[first],
            "start": np.where(has, own_start, np.minimum.reduceat(start, first)),
            "end": np.where(has, own_end, np.maximum.reduceat(end, first)),
            "pid": pid[first],
            "phases": [frozenset(names[a:b]) for a, b in zip(*bounds, strict=True)],
        }
    )
