"""Per step, what the capture recorded in it: analysis.advice.coverage's table of GPU coverage by step, the
events of a step's process whose time lies in the step's [start, end), counted by
analysis.intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.advice.launches import gpu_work
from analysis.intervals import in_windows
from analysis.readers.global_ids import PROCESS_MASK
from analysis.stats import pair_keys
from analysis.trace.frames import GPU_WORK
from analysis.trace.trace import Trace

COLUMNS = ["Step", "Measured", "Start (ns)", "End (ns)", "Launch calls", "Without GPU work", "Graph launches",
           "Kernels", "Copies", "Sets", "Kernels without launch call"]  # fmt: skip


def _calls_of(trace: Trace, work: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per GPU event, the start of the first CUDA call with its process and correlation id, and whether
    there is none (lost): float where one is lost, as a left join on the pair would give it."""
    rt = trace.frame("runtime", ["start", "correlation_id", "global_tid"])
    call_key, work_key = pair_keys(
        rt["global_tid"].to_numpy() & PROCESS_MASK, rt["correlation_id"].to_numpy(),
        work["pid"].to_numpy(), work["correlation_id"].to_numpy(),
    )  # fmt: skip
    keys, first = np.unique(call_key, return_index=True)  # the first call of each pair
    if not len(keys):
        return np.full(len(work), np.nan), np.ones(len(work), dtype=bool)
    at = np.minimum(np.searchsorted(keys, work_key), len(keys) - 1)
    lost = keys[at] != work_key
    call = rt["start"].to_numpy()[first[at]]
    return (call.astype(np.float64) if lost.any() else call), lost


def step_table(trace: Trace, frame: pd.DataFrame, calls: pd.DataFrame) -> pd.DataFrame:
    """Per step of `frame` (analysis.advice.steps): Step, Measured, Start (ns), End (ns), Launch calls (of
    kernels), Without GPU work, Graph launches, the Kernels, Copies and Sets launched from it (by the time
    of their launching call), and the Kernels without launch call that ran in it (by their own start:
    launched before the capture began, or their calls were lost)."""
    if frame.empty:
        return pd.DataFrame([], columns=COLUMNS)
    work = gpu_work(trace)
    if len(work):
        pid, code = work["pid"].to_numpy(), work["kind"].cat.codes.to_numpy()
        kind = {k: code == work["kind"].cat.categories.get_loc(k) if k in work["kind"].cat.categories else
                np.zeros(len(work), dtype=bool) for k in GPU_WORK}  # fmt: skip
        if trace.has("runtime"):
            call, lost = _calls_of(trace, work)
        else:
            call, lost = work["start"].to_numpy(), np.zeros(len(work), dtype=bool)
        done = in_windows(pid[~lost], call[~lost], {k: kind[k][~lost] for k in GPU_WORK}, frame)
        orphan = lost & kind["kernels"]
        orphans = in_windows(pid[orphan], work["start"].to_numpy()[orphan], {"n": None}, frame)["n"]
    else:
        done = {k: np.zeros(len(frame), dtype=np.int64) for k in GPU_WORK}
        orphans = np.zeros(len(frame), dtype=np.int64)
    graph = calls["graph"].astype(bool).to_numpy()
    launched = in_windows(
        calls["pid"].to_numpy(), calls["start"].to_numpy(),
        {"calls": ~graph, "without": (calls["work"] == 0).to_numpy() & ~graph, "graphs": graph}, frame,
    )  # fmt: skip
    return pd.DataFrame(
        {
            "Step": frame["step"].astype(np.int64).to_numpy(),
            "Measured": frame["measured"].astype(bool).to_numpy(),
            "Start (ns)": frame["start"].astype(np.int64).to_numpy(),
            "End (ns)": frame["end"].astype(np.int64).to_numpy(),
            "Launch calls": launched["calls"],
            "Without GPU work": launched["without"],
            "Graph launches": launched["graphs"],
            "Kernels": done["kernels"],
            "Copies": done["memcpy"],
            "Sets": done["memset"],
            "Kernels without launch call": orphans,
        }
    )
