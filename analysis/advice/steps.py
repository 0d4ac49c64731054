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
    nv = trace.frame("nvtx", ["start", "end", "global_tid", "name", "payload", "domain"])
    gpu_side = label_test(nv["domain"], lambda labels: labels == "GPU")  # Kineto's GPU-side copies
    if gpu_side.any():
        nv = nv[~gpu_side]
    codes, labels = label_codes(nv["name"])  # names are matched once each, not once per range
    pid = nv["global_tid"].to_numpy() & PROCESS_MASK
    numbers = pd.Series(labels, dtype=object).str.extract(STEP_RE.pattern, expand=False)
    kineto = np.append(numbers.notna().to_numpy(), False)[codes]
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
            frame.sort_values("start").reset_index(drop=True), "ProfilerStep", nvtx_end=int(ks["end"].max())
        )

    def named(wanted: set[str]) -> np.ndarray:
        return np.append(np.array([n in wanted for n in labels], dtype=bool), False)[codes]

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
        return Steps(
            frame, "harness", has_measured=bool(len(measured)), nvtx_end=max(ends), spans=spans,
            by_record=by_record,
        )  # fmt: skip
    plain = nv[named({STEP})].sort_values("start")
    if plain.empty:
        return Steps(empty, "")
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
    return Steps(frame, "step ranges", nvtx_end=int(plain["end"].max()))


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
