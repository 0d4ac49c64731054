"""Framework operator tables (PyTorch's aten:: ops and the like) from a trace's cpu_ops frame.

What torch.profiler's `key_averages().table()` shows, computed from the trace alone, so that it works on
any Kineto trace (the harness's own, or one made elsewhere for HTA) and can be cut by an annotation range:

- Self CPU: an op's time less the time of the ops directly inside it on the same thread
- CPU Total: an op's whole time (an op nested in one of the same name counts in both, as in torch)
- CPU Avg: CPU Total per call
- Self CUDA: the time of the kernels whose launch (the runtime call with the kernel's correlation id) was
  made directly inside the op; CUDA Total: of those launched inside it or any op within it; CUDA Avg: CUDA
  Total per call; only when the trace has kernels
- each time with its share of the total, as torch computes it: Self CPU % and CPU Total % of the sum of every
  op's self CPU time, Self CUDA % and CUDA Total % of the sum of every op's self CUDA time; shares and
  averages to one decimal, times in whole ns, as every `nsys stats` table gives them
- Calls

`sort` orders by any column (or torch's sort_by key, e.g. self_cpu_time_total), `top` keeps the first rows,
`group_by_input_shape` adds Input Shapes (recorded with record_shapes=True) to the key, as
key_averages(group_by_input_shape=True) does. `within` keeps the ops that start inside a range of that name
(any thread of their process: backward runs on autograd's; not the GPU's copies of the ranges).

`harness operators`. Light at import, as every table module (the registry reads `TABLE`): the computing
functions import numpy and pandas.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from analysis.errors import ExportError, OptionsError
from analysis.tables.table import TOP, Option, frame_table

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from analysis.trace.trace import Trace

NAME, CALLS, SHAPES = "Name", "Calls", "Input Shapes"
SELF_CPU, CPU_TOTAL, CPU_AVG = "Self CPU (ns)", "CPU Total (ns)", "CPU Avg (ns)"
SELF_CUDA, CUDA_TOTAL, CUDA_AVG = "Self CUDA (ns)", "CUDA Total (ns)", "CUDA Avg (ns)"
SELF_CPU_PCT, CPU_TOTAL_PCT = "Self CPU (%)", "CPU Total (%)"
SELF_CUDA_PCT, CUDA_TOTAL_PCT = "Self CUDA (%)", "CUDA Total (%)"
CPU_COLUMNS = [SELF_CPU_PCT, SELF_CPU, CPU_TOTAL_PCT, CPU_TOTAL, CPU_AVG]
CUDA_COLUMNS = [SELF_CUDA, SELF_CUDA_PCT, CUDA_TOTAL, CUDA_TOTAL_PCT, CUDA_AVG]
# torch.profiler's sort_by keys, for those who know them
SORT_KEYS = {
    "self_cpu_time_total": SELF_CPU,
    "cpu_time_total": CPU_TOTAL,
    "cpu_time": CPU_AVG,
    "self_cuda_time_total": SELF_CUDA,
    "cuda_time_total": CUDA_TOTAL,
    "cuda_time": CUDA_AVG,
    "self_device_time_total": SELF_CUDA,
    "device_time_total": CUDA_TOTAL,
    "device_time": CUDA_AVG,
    "count": CALLS,
}


def _nest(start: np.ndarray, end: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Each event's parent (index of the innermost event around it on its thread), -1 for none."""
    import numpy as np

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


def _op_parent(parent: np.ndarray, n: int) -> np.ndarray:
    """`parent` (of the ops, then of the launch calls after them) made the innermost op around each event:
    a call inside another call, or an op inside a call, belongs to the op around them."""
    up = parent.copy()
    while (through := up >= n).any():
        up[through] = parent[up[through]]
    return up


def _inside(starts: np.ndarray, ranges: pd.DataFrame) -> np.ndarray:
    """Which of `starts` fall inside one of `ranges` (start, end; nested or overlapping ones merged)."""
    import numpy as np

    if ranges.empty:
        return np.zeros(len(starts), dtype=bool)
    r = ranges.sort_values("start")
    lo, hi = r["start"].to_numpy(), np.maximum.accumulate(r["end"].to_numpy())
    i = np.searchsorted(lo, starts, side="right") - 1
    return (i >= 0) & (starts < hi[np.clip(i, 0, None)])


def _inside_own(
    calls: pd.DataFrame, ranges: pd.DataFrame, within: str, trace: Trace
) -> tuple[np.ndarray, int]:
    """Which ops start inside one of `ranges` of their own process (any thread), and how many ranges are
    in the ops' processes. A Kineto trace's GPU copies of its ranges (gpu_user_annotation) lie on the GPU's
    timeline, in a process of their own: no op is in them."""
    import numpy as np

    from analysis.readers.global_ids import pid_of

    op_pid, range_pid = pid_of(calls["global_tid"]), pid_of(ranges["global_tid"])
    if not np.isin(range_pid, op_pid).any():
        raise ExportError(
            f"{within!r} is a range on the GPU's timeline (the trace's gpu_user_annotation), where no "
            f"operator runs: {trace.path} has no such range on the CPU"
        )
    starts = calls["start"].to_numpy(np.int64)
    inside = np.zeros(len(calls), dtype=bool)
    for pid in np.unique(range_pid).tolist():
        mine = op_pid == pid
        inside[mine] = _inside(starts[mine], ranges[range_pid == pid])
    return inside, int(np.isin(range_pid, op_pid).sum())


def op_self_times(trace: Trace) -> pd.DataFrame:
    """One row per operator call: name, start, global_tid, duration_ns, self_cpu_ns, self_cuda_ns."""
    import numpy as np
    import pandas as pd

    trace.require("cpu_ops", "CPU operators")
    ops = trace.frame("cpu_ops", ["start", "end", "global_tid", "name_id", "shapes_id"])
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
    parent = _op_parent(_nest(start, end, tid), n)
    op_parent = parent[:n]
    child = np.zeros(n, dtype=np.int64)
    has = op_parent >= 0
    np.add.at(child, op_parent[has], dur[has])
    if len(launches):
        # a launch's kernels count once in its op, also when the call is recorded twice (a driver call
        # inside the runtime call that made it, with the same correlation id)
        credit = pd.DataFrame(
            {"op": parent[n:], "correlation": rt["correlation_id"].to_numpy(np.int64), "ns": launches}
        )
        credit = credit[credit["op"] >= 0].drop_duplicates(["op", "correlation"])
        np.add.at(cuda, credit["op"].to_numpy(), credit["ns"].to_numpy())
    names = trace.strings(np.unique(ops["name_id"].to_numpy()))
    shapes = trace.strings(np.unique(ops["shapes_id"].to_numpy()))
    return pd.DataFrame(
        {
            "name": ops["name_id"].map(names),
            "shapes": ops["shapes_id"].map(shapes).fillna(""),
            "start": ops["start"],
            "global_tid": ops["global_tid"],
            "duration_ns": dur,
            "self_cpu_ns": dur - child,
            "self_cuda_ns": cuda,
            "cuda_total_ns": _subtree_sums(cuda, op_parent),
        }
    )


def _subtree_sums(values: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Each op's value plus those of every op nested inside it (parents always come before their children
    in start order, so one pass from the innermost up adds each subtree once)."""
    import numpy as np

    total = values.astype(np.int64).copy()
    order = np.argsort(-_depth(parent), kind="stable")
    for i in order.tolist():
        p = parent[i]
        if p >= 0:
            total[p] += total[i]
    return total


def _depth(parent: np.ndarray) -> np.ndarray:
    import numpy as np

    depth = np.zeros(len(parent), dtype=np.int64)
    for i in range(len(parent)):
        p, d = parent[i], 0
        while p >= 0:
            d, p = d + 1, parent[p]
        depth[i] = d
    return depth


def sort_column(sort: str, columns: list[str]) -> str:
    """The column `sort` names: a column (any case, the unit optional) or one of torch's sort_by keys;
    OptionsError (a usage error, exit 2) for any other."""
    key = sort.strip().lower()
    if key in SORT_KEYS and SORT_KEYS[key] in columns:
        return SORT_KEYS[key]
    for c in columns:
        if key in (c.lower(), c.lower().removesuffix(" (ns)")):
            return c

    choices = ", ".join(c.removesuffix(" (ns)") for c in columns)
    raise OptionsError(
        f"no operator column {sort!r} to sort by; choose one of {choices}, or a torch sort_by key"
    )


def operator_table(
    trace: Trace,
    within: str | None = None,
    *,
    top: int | None = None,
    sort: str = SELF_CPU,
    group_by_input_shape: bool = False,
) -> pd.DataFrame:
    """Operators as torch.profiler's key_averages() table shows them: Name (and Input Shapes with
    `group_by_input_shape`), Self CPU and CPU Total with their %, CPU Avg, the CUDA columns when the trace
    has kernels, Calls; sorted by `sort` (descending; Name ascending breaks ties), the first `top` rows.
    `within`: only the ops that start inside ranges of that name."""
    import numpy as np

    from analysis.stats import round_half_up

    calls = op_self_times(trace)
    empty = ""
    if within is not None:
        ranges = trace.frame("nvtx", ["start", "end", "name", "global_tid"])
        ranges = ranges[ranges["name"].astype(str) == within]
        if ranges.empty:
            raise ExportError(f"no range named {within!r} in {trace.path}")
        inside, own = _inside_own(calls, ranges, within, trace)
        calls = calls[inside]
        if calls.empty:
            empty = f"no operator starts inside the range {within!r} ({own:,} of that name)"
    keys = ["name", "shapes"] if group_by_input_shape else ["name"]
    sums = {NAME: ("name", "first"), SHAPES: ("shapes", "first"), CALLS: ("name", "size"),
            SELF_CPU: ("self_cpu_ns", "sum"), CPU_TOTAL: ("duration_ns", "sum"),
            SELF_CUDA: ("self_cuda_ns", "sum"), CUDA_TOTAL: ("cuda_total_ns", "sum")}  # fmt: skip
    table = calls.groupby(keys, sort=False).agg(**sums).reset_index(drop=True)
    if not group_by_input_shape:
        table = table.drop(columns=[SHAPES])
    # shares and averages to one decimal (half away from zero), as every `nsys stats` table gives them
    with np.errstate(divide="ignore", invalid="ignore"):
        cpu_all, cuda_all = float(calls["self_cpu_ns"].sum()), float(calls["self_cuda_ns"].sum())
        table[SELF_CPU_PCT] = round_half_up(table[SELF_CPU] / cpu_all * 100) if cpu_all else np.nan
        table[CPU_TOTAL_PCT] = round_half_up(table[CPU_TOTAL] / cpu_all * 100) if cpu_all else np.nan
        table[CPU_AVG] = round_half_up(table[CPU_TOTAL] / table[CALLS])
        table[SELF_CUDA_PCT] = round_half_up(table[SELF_CUDA] / cuda_all * 100) if cuda_all else np.nan
        table[CUDA_TOTAL_PCT] = round_half_up(table[CUDA_TOTAL] / cuda_all * 100) if cuda_all else np.nan
        table[CUDA_AVG] = round_half_up(table[CUDA_TOTAL] / table[CALLS])
    columns = [NAME, *([SHAPES] if group_by_input_shape else []), *CPU_COLUMNS]
    if trace.has("kernels"):
        columns += CUDA_COLUMNS
    table = table[[*columns, CALLS]]
    by = sort_column(sort, list(table.columns))
    ascending = by in (NAME, SHAPES)
    table = table.sort_values([by, NAME], ascending=[ascending, True], ignore_index=True, kind="stable")
    # what a narrow terminal keeps after the registry's deciding columns (Name, Calls): the sort column first
    table.attrs["then"] = [by, *([SHAPES] if group_by_input_shape else []), SELF_CPU, CPU_TOTAL]
    table.attrs["priority"] = [NAME, CALLS, *table.attrs["then"]]
    table.attrs["notes"] = [*trace.notes, *([empty] if empty else [])]  # and events the reader left out
    return table.head(top) if top else table


def by_self_cuda(table: pd.DataFrame) -> pd.DataFrame:
    """The same table ordered by self CUDA time (only ops that launched kernels)."""
    out = table[table[SELF_CUDA] > 0]
    return out.sort_values([SELF_CUDA, NAME], ascending=[False, True], ignore_index=True)


# --- the table -------------------------------------------------------------------------------------------


# --sort and --top, which `harness run --profiler torch` takes too
SORT_OPTION = Option(
    "sort", "--sort",
    "Sort the operators by this column (descending), e.g. 'Self CUDA', 'CPU Total', Calls, or a torch "
    "sort_by key (self_cpu_time_total, cuda_time_total, count).",
    str, "Self CPU", metavar="<column>",
)  # fmt: skip
TOP_OPTION = replace(TOP, help="Keep the first N operators (default: every one; run --profiler torch: 15).")
SHAPES_OPTION = Option(
    "group_by_input_shape", "--group-by-input-shape",
    "One row per operator and input shapes (traces recorded with record_shapes=True).",
)  # fmt: skip
WITHIN_OPTION = Option(
    "within",
    "--range",
    "Only operators that start inside ranges of this name.",
    str,
    None,
    metavar="<name>",
    names="a range's name",
)

TABLE = frame_table(
    "operators",
    "operators",
    operator_table,
    summary="Framework operators of a torch.profiler trace (key_averages).",
    help="Framework operators (aten:: …) of a torch.profiler trace, with the columns of torch.profiler's "
    "key_averages() table: self and total CPU and CUDA time with their %, averages, calls.",
    mirrors="torch.profiler key_averages().table()",
    options=(SORT_OPTION, TOP_OPTION, SHAPES_OPTION, WITHIN_OPTION),
    order=80,
    title="framework operators",
    deciding=("Name", "Calls"),
    example="harness operators trace.json.gz --sort 'Self CUDA' --top 20",
)
