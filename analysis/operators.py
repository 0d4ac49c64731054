"""Framework operator tables (PyTorch's aten:: ops and the like) from a trace's cpu_ops frame.

What torch.profiler's `key_averages()` table shows, computed from the trace alone, so that it works on
any Kineto trace (the harness's own, or one made elsewhere for HTA) and can be cut by an annotation range:

- Self CPU: an op's time less the time of the ops directly inside it on the same thread
- CPU Total: an op's whole time (an op nested in one of the same name counts in both, as in torch)
- Self CUDA: the time of the kernels whose launch (the runtime call with the kernel's correlation id) was
  made directly inside the op; only when the trace has kernels

`within` keeps the ops that start inside a range of that name (any thread: backward runs on autograd's).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.trace import Trace

NAME, CALLS = "Name", "Calls"
SELF_CPU, CPU_TOTAL, SELF_CUDA = "Self CPU (ns)", "CPU Total (ns)", "Self CUDA (ns)"


def _nest(start: np.ndarray, end: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Each event's parent (index of the innermost event around it on its thread), -1 for none."""
    order = np.lexsort((-end, start, tid))
    parent = np.full(len(start), -1, dtype=np.int64)
    stack: list[int] = []
    last_tid = None
    s_l, e_l, t_l = start.tolist(), end.tolist(), tid.tolist()
    for i in order.tolist():
        if t_l[i] != last_tid:
            stack, last_tid = [], t_l[i]
        while stack and e_l[stack[-1]] <= s_l[i]:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


def _inside(starts: np.ndarray, ranges: pd.DataFrame) -> np.ndarray:
    """Which of `starts` fall inside one of `ranges` (start, end; nested or overlapping ones merged)."""
    if ranges.empty:
        return np.zeros(len(starts), dtype=bool)
    r = ranges.sort_values("start")
    lo, hi = r["start"].to_numpy(), np.maximum.accumulate(r["end"].to_numpy())
    i = np.searchsorted(lo, starts, side="right") - 1
    return (i >= 0) & (starts < hi[np.clip(i, 0, None)])


def op_self_times(trace: Trace) -> pd.DataFrame:
    """One row per operator call: name, start, global_tid, duration_ns, self_cpu_ns, self_cuda_ns."""
    trace.require("cpu_ops", "CPU operators")
    ops = trace.frame("cpu_ops", ["start", "end", "global_tid", "name_id"])
    start, end = ops["start"].to_numpy(np.int64), ops["end"].to_numpy(np.int64)
    tid = ops["global_tid"].to_numpy(np.int64)
    n = len(ops)
    dur = end - start
    cuda = np.zeros(n, dtype=np.int64)
    launches = np.empty(0, dtype=np.int64)
    if trace.has("kernels") and trace.has("runtime"):
        rt = trace.frame("runtime", ["start", "end", "global_tid", "correlation_id"])
        k = trace.frame("kernels", ["start", "end", "correlation_id"])
        per_launch = (k["end"] - k["start"]).groupby(k["correlation_id"]).sum()
        rt = rt[rt["correlation_id"].isin(per_launch.index)]
        start = np.concatenate([start, rt["start"].to_numpy(np.int64)])
        end = np.concatenate([end, rt["end"].to_numpy(np.int64)])
        tid = np.concatenate([tid, rt["global_tid"].to_numpy(np.int64)])
        launches = per_launch.reindex(rt["correlation_id"]).to_numpy(np.int64)
    parent = _nest(start, end, tid)
    op_parent = parent[:n]
    child = np.zeros(n, dtype=np.int64)
    has = op_parent >= 0
    np.add.at(child, op_parent[has], dur[has])
    if len(launches):
        launch_parent = parent[n:]
        hit = launch_parent >= 0
        np.add.at(cuda, launch_parent[hit], launches[hit])
    names = trace.strings(np.unique(ops["name_id"].to_numpy()))
    return pd.DataFrame(
        {
            "name": ops["name_id"].map(names),
            "start": ops["start"],
            "global_tid": ops["global_tid"],
            "duration_ns": dur,
            "self_cpu_ns": dur - child,
            "self_cuda_ns": cuda,
        }
    )


def operator_table(trace: Trace, within: str | None = None, *, top: int | None = None) -> pd.DataFrame:
    """Operators by self CPU time (descending): Name, Calls, Self CPU (ns), CPU Total (ns), and Self CUDA
    (ns) when the trace has kernels. `within`: only the ops that start inside ranges of that name."""
    calls = op_self_times(trace)
    if within is not None:
        ranges = trace.frame("nvtx", ["start", "end", "name"])
        ranges = ranges[ranges["name"].astype(str) == within]
        if ranges.empty:
            from analysis.errors import ExportError

            raise ExportError(f"no range named {within!r} in {trace.path}")
        calls = calls[_inside(calls["start"].to_numpy(np.int64), ranges)]
    sums = {NAME: ("name", "first"), CALLS: ("name", "size"), SELF_CPU: ("self_cpu_ns", "sum"),
            CPU_TOTAL: ("duration_ns", "sum"), SELF_CUDA: ("self_cuda_ns", "sum")}  # fmt: skip
    table = calls.groupby("name", sort=False).agg(**sums)
    table = table.sort_values([SELF_CPU, NAME], ascending=[False, True], ignore_index=True)
    if not trace.has("kernels"):
        table = table.drop(columns=[SELF_CUDA])
    return table.head(top) if top else table


def by_self_cuda(table: pd.DataFrame) -> pd.DataFrame:
    """The same table ordered by self CUDA time (only ops that launched kernels)."""
    out = table[table[SELF_CUDA] > 0]
    return out.sort_values([SELF_CUDA, NAME], ascending=[False, True], ignore_index=True)
