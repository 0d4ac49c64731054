"""Iterations of a capture: the repeated NVTX range that marks one (a training step, a generation step).

`find_iterations(trace)` takes NVTX ranges named NAME (as recorded, `DOMAIN:NAME`, or PyTorch's operator name
without its `, seq = N, op_id = N` fields), else the harness's `step` ranges (those inside its `measured`
range when there is one: the warm-up steps lie outside it), else Kineto's `ProfilerStep#N`. Ranges are taken
per process in start order; with several processes (ranks) in one capture, iteration k lasts as long as the
slowest process's k-th range, and the capture has as many iterations as its process with the fewest.
Each iteration has a number, as `harness timeline --step N` numbers steps: the harness's step index (the
`step` range's payload) or Kineto's N of ProfilerStep#N where every range has one, one of its own per
process; else its place, from 0, warm-up included (so a lost step range does not renumber the steps after
it, and ProfilerStep#1009 is iteration 1009). `Iterations.window(n)` gives iteration number n on each
process, for restricting other tables to it (`in_windows`);
`Iterations.measured()` the span of the iterations after warm-up, so that tables leave out what the
iteration times leave out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.errors import AnalysisError
from analysis.joins.nvtx_ranges import all_ranges, tagged
from analysis.nvtx_names import group_names
from analysis.readers.global_ids import pid_of
from analysis.trace.trace import Trace
from workloads.names import MEASURED, STEP, counted

PROFILER_STEP = "ProfilerStep#"


@dataclass(frozen=True)
class Iterations:
    """The iterations of one side. `ranges`: pid, index (per process, from 0, warm-up included), number
    (as the module's docstring says), start, end, warmup (bool); `durations`: one per iteration index after
    warm-up, the longest over processes (ns)."""

    source: str  # what was found: "NVTX `step` ranges", "ProfilerStep#N ranges", "NVTX ranges `x`", ""
    ranges: pd.DataFrame
    durations: np.ndarray
    warmup: int  # left out at the start of each process

    @property
    def count(self) -> int:
        return len(self.durations)

    def window(self, number: int, label: str) -> pd.DataFrame:
        """pid, start, end of iteration number `number` on each process."""
        per = self.ranges[self.ranges["number"] == number]
        if per.empty:
            have = int(self.ranges["index"].max()) + 1 if len(self.ranges) else 0
            lo, hi = (int(self.ranges["number"].min()), int(self.ranges["number"].max())) if have else (0, -1)
            if not have:
                found = "no iterations"
            elif lo <= number <= hi:  # a step whose range was lost
                found = f"no iteration {number} of its {counted(have, 'iteration')} numbered {lo}..{hi}"
            else:
                found = f"only {counted(have, 'iteration')} ({lo}..{hi})"
            raise AnalysisError(f"--iteration {number}: {label} has {found} ({self.source or 'none found'})")
        return per[["pid", "start", "end"]].reset_index(drop=True)

    def measured(self) -> pd.DataFrame:
        """pid, start, end on each process from its first iteration after warm-up to the end of its last."""
        kept = self.ranges[~self.ranges["warmup"].astype(bool)]
        span = kept.groupby("pid").agg(start=("start", "min"), end=("end", "max")).reset_index()
        return span[["pid", "start", "end"]]


def _no_iterations() -> Iterations:
    columns = {"pid": np.int64, "index": np.int64, "number": np.int64, "start": np.int64, "end": np.int64,
               "warmup": bool}  # fmt: skip
    empty = pd.DataFrame({c: np.empty(0, dtype=t) for c, t in columns.items()})
    return Iterations("", empty, np.empty(0, np.int64), 0)


def find_iterations(trace: Trace, name: str | None = None, *, warmup: int = 0, label: str = "") -> Iterations:
    """The iterations of `trace` (see the module's docstring); `warmup` more left out at the start of each
    process. A `name` no range has is an error; finding none otherwise is not."""
    if not trace.has("nvtx"):
        if name is not None:
            raise AnalysisError(f"--iteration-range {name}: {label or trace.path} has no NVTX ranges")
        return _no_iterations()

    r = all_ranges(trace, columns=["name", "domain", "start_ns", "end_ns", "global_tid", "payload"])
    names = tagged(r).astype(str).to_numpy()
    measured = np.zeros(len(r), dtype=bool)
    if name is not None:
        # the name as recorded, or PyTorch's operator (`aten::mm` for `aten::mm, seq = 4, op_id = 9`)
        pick = (names == name) | (group_names(pd.Series(names, dtype=object)).to_numpy() == name)
        source = f"NVTX ranges `{name}`"
        if not pick.any():
            raise AnalysisError(
                f"--iteration-range {name}: no NVTX range of that name in {label or trace.path}"
            )
    else:
        pick = names == STEP
        source = f"NVTX `{STEP}` ranges"
        if not pick.any():
            pick = np.char.startswith(names.astype(str), PROFILER_STEP)
            source = f"{PROFILER_STEP}N ranges"
        if not pick.any():
            return _no_iterations()
        measured = names == MEASURED
    pid = pid_of(r["global_tid"].to_numpy())
    start, end = r["start_ns"].to_numpy(), r["end_ns"].to_numpy()
    payload = pd.to_numeric(r["payload"], errors="coerce").to_numpy(dtype=float)
    it = pd.DataFrame({"pid": pid[pick], "start": start[pick], "end": end[pick], "payload": payload[pick]})
    it = it.sort_values(["pid", "start"], kind="stable").reset_index(drop=True)
    it["index"] = it.groupby("pid").cumcount().astype(np.int64)
    it["number"] = it["index"] if name is not None else _numbers(it)
    early = it["index"].to_numpy() < warmup
    if measured.any():  # the harness's warm-up steps lie outside its `measured` range
        m = pd.DataFrame({"pid": pid[measured], "start": start[measured], "end": end[measured]})
        inside = np.zeros(len(it), dtype=bool)
        for row in m.itertuples(index=False):
            inside |= (
                (it["pid"] == row.pid) & (it["start"] >= row.start) & (it["end"] <= row.end)
            ).to_numpy()
        early |= ~inside
    it["warmup"] = early
    kept = it[~early].copy()
    kept["k"] = kept.groupby("pid").cumcount()
    per_process = kept.groupby("pid")["k"].max() + 1
    n = int(per_process.min()) if len(per_process) else 0
    durations = (kept["end"] - kept["start"]).groupby(kept["k"]).max().to_numpy()[:n].astype(np.int64)
    left = int(early.sum() // max(it["pid"].nunique(), 1))
    return Iterations(source, it[["pid", "index", "number", "start", "end", "warmup"]], durations, left)


def _numbers(it: pd.DataFrame) -> pd.Series:
    """The iterations' numbers: their payloads (the harness's step index, ProfilerStep#N's N) where each has
    one, whole, and none repeats on its process; else their places."""
    payload = it["payload"]
    whole = payload.notna().all() and bool((payload == np.floor(payload)).all())
    if not whole or it.duplicated(["pid", "payload"]).any() or (payload.abs() >= 2**62).any():
        return it["index"]
    return payload.astype(np.int64)


def in_windows(pid: np.ndarray, t: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """Whether each moment `t` of process `pid` lies in that process's window [start, end)."""
    inside = np.zeros(len(t), dtype=bool)
    for w in windows.itertuples(index=False):
        inside |= (pid == w.pid) & (t >= w.start) & (t < w.end)
    return inside
