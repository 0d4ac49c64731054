"""Launch latency per kernel, like `nsys stats -r kernexecsum` (cuda_kern_exec_sum).

For each kernel and the CUDA call that launched it: API time (the call), queue time (call end to kernel
start, when the kernel started after the call returned), kernel time, and total (call start to the later
of call end and kernel end). Grouped by process, thread, device, API name and kernel name.

`harness launch`. Light at import, as every table module (the registry reads `TABLE`): the computing
functions import numpy, pandas and what they compute with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from analysis.tables.table import TOP, InSummary, frame_table

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from analysis.trace.trace import Trace

MEASURES = (("T", "total"), ("A", "api"), ("Q", "queue"), ("K", "kernel"))
KEYS = ["PID", "TID", "DevId", "API Name", "Kernel Name"]


def launch_summary(trace: Trace) -> pd.DataFrame:
    """Columns as kernexecsum: PID, TID, DevId, Count, QCount, then Avg/Med/Min/Max/StdDev (ns) of
    T(otal), A(PI), Q(ueue) and K(ernel) time, API Name, Kernel Name; largest TAvg first."""
    from analysis.joins.launch_join import Unordered

    trace.require("kernels", "CUDA kernel data")
    trace.require("runtime", "CUDA runtime calls (needed for launch latency)")
    try:
        return _by_blocks(trace)
    except Unordered:
        return _whole(trace)


def _whole(trace: Trace) -> pd.DataFrame:
    """launch_summary over the whole join (`kernel_launches`): exports not in correlationId order."""
    import numpy as np

    from analysis.joins.runtime import kernel_launches
    from analysis.readers.global_ids import pid_of, tid_of
    from analysis.stats import name_codes

    k = kernel_launches(trace, extra=("start", "end", "device_id"))
    notes, api = list(k.attrs["notes"]), k.attrs["api_names"]
    if not k["has_call"].all():  # a mask of all True would copy every column of 1M kernels
        notes.append(_no_call_note(int((~k["has_call"]).sum()), len(k)))
        k = k[k["has_call"]]
    call_start = k["call_start"].to_numpy()
    call_end = k["call_end"].to_numpy()
    queue = k["start"].to_numpy() - call_end
    # grouped by integer codes, named after: a string per row (1M kernels) costs far more
    api_code, api_names, _ = name_codes(k["api_id"], api)
    kernel_code, kernel_names, _ = name_codes(k["name_id"], trace.strings(k["name_id"].unique()))
    keys = {
        "PID": pid_of(k["global_tid"]),
        "TID": tid_of(k["global_tid"]),
        "DevId": k["device_id"].to_numpy(),
        "API Name": api_code,
        "Kernel Name": kernel_code,
    }
    measures = {
        "total": np.maximum(call_end, k["end"].to_numpy()) - call_start,
        "api": call_end - call_start,
        "queue": queue,
        "kernel": k["duration"].to_numpy(),
    }
    del k, call_start, call_end, queue
    for c in list(measures):  # 4 bytes a value where they fit, each 8-byte column let go in turn
        measures[c] = _narrow(measures[c])
    named = (api_code >= 0) & (kernel_code >= 0)  # code -1: no name (dropped, as groupby drops NaN keys)
    if not named.all():
        keys = {c: v[named] for c, v in keys.items()}
        measures = {c: v[named] for c, v in measures.items()}
    out = _per_group(keys, measures)
    del measures
    out["API Name"] = api_names[out["API Name"].to_numpy()]
    out["Kernel Name"] = kernel_names[out["Kernel Name"].to_numpy()]
    return _ordered(out, [*trace.notes, *notes])


def _no_call_note(without_call: int, kernels: int) -> str:
    """Kernels without their launching call (no runtime call of their process with their correlationId, or
    one left out as a row that cannot be right): nsys stats leaves them out of kernexecsum without a word;
    here the table says how many it lacks."""
    return (
        f"left out {without_call:,} of {kernels:,} kernels with no usable CUDA call that launched them "
        "(no runtime call of their process with their correlationId, or one left out)"
    )


def _ordered(out: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    out = out.sort_values("TAvg (ns)", ascending=False, kind="stable").reset_index(drop=True)
    out = out[[*KEYS[:3], *[c for c in out.columns if c not in KEYS], *KEYS[3:]]]
    out.attrs["notes"] = notes
    return out


class _Names:
    """Name ids as one code per name across blocks (`stats.name_codes`: ids of one name share a code, an
    id without a name is -1), and each code's name."""

    def __init__(self, name_of: Callable[[list[int]], dict[int, str]]) -> None:
        self.name_of = name_of
        self.code_of_id: dict[int, int] = {}
        self.code_of_name: dict[str, int] = {}

    def codes(self, ids: np.ndarray) -> np.ndarray:
        import numpy as np

        distinct, per_row = np.unique(ids, return_inverse=True)
        new = [int(i) for i in distinct.tolist() if int(i) not in self.code_of_id]
        for i, text in ((i, self.name_of(new).get(i)) for i in new):
            self.code_of_id[i] = (
                -1 if text is None else self.code_of_name.setdefault(text, len(self.code_of_name))
            )
        return np.array([self.code_of_id[int(i)] for i in distinct.tolist()], dtype=np.int64)[
            per_row.reshape(-1)
        ]

    def names(self) -> np.ndarray:
        import numpy as np

        return np.array(list(self.code_of_name), dtype=object)


def _by_blocks(trace: Trace, rows: int | None = None) -> pd.DataFrame:
    """launch_summary with the kernels and their calls a block at a time (analysis.joins.launch_join): each
    group's four measures are kept in the kernels' order (2 or 4 bytes a value where they fit), not a frame
    of every kernel with its call (4M kernels: ~660 MB at the peak). Raises launch_join.Unordered."""
    import numpy as np

    from analysis.joins.launch_join import SWEEP_ROWS, launch_blocks
    from analysis.joins.runtime import plain_name
    from analysis.readers.global_ids import pid_of, tid_of

    api = _Names(lambda ids: {i: plain_name(n) for i, n in trace.strings(ids).items()})
    kernel = _Names(trace.strings)
    index: dict[tuple[int, ...], int] = {}
    pieces: list[dict[str, list[np.ndarray]]] = []
    notes: list[str] = []
    kernels = without_call = 0
    for block in launch_blocks(
        trace,
        ("name_id", "duration", "global_pid", "start", "end", "device_id"),
        rows=rows or SWEEP_ROWS,
        notes=notes,
    ):
        has = block["has_call"]
        kernels += len(has)
        without_call += len(has) - int(has.sum())
        b = block if has.all() else {c: v[has] for c, v in block.items()}
        keys = (
            pid_of(b["global_tid"]),
            tid_of(b["global_tid"]),
            b["device_id"],
            api.codes(b["api_id"]),
            kernel.codes(b["name_id"]),
        )
        named = (keys[3] >= 0) & (keys[4] >= 0)
        call_start, call_end = b["call_start"], b["call_end"]
        measures = {
            "total": np.maximum(call_end, b["end"]) - call_start,
            "api": call_end - call_start,
            "queue": b["start"] - call_end,
            "kernel": b["duration"],
        }
        if not named.all():
            keys = tuple(k[named] for k in keys)
            measures = {c: v[named] for c, v in measures.items()}
        _add_block(index, pieces, keys, measures)
    if without_call:
        notes.append(_no_call_note(without_call, kernels))
    for text in notes:
        trace.note(text)
    rows = [_row(lambda col, g=g: _joined(pieces[g][col])) for g in range(len(pieces))]
    key_rows = list(index)
    out = _frame(rows, {c: np.array([k[i] for k in key_rows], dtype=np.int64) for i, c in enumerate(KEYS)})
    out["API Name"] = api.names()[out["API Name"].to_numpy()] if len(out) else out["API Name"]
    out["Kernel Name"] = kernel.names()[out["Kernel Name"].to_numpy()] if len(out) else out["Kernel Name"]
    return _ordered(out, list(trace.notes))


def _add_block(
    index: dict[tuple[int, ...], int],
    pieces: list[dict[str, list[np.ndarray]]],
    keys: tuple[np.ndarray, ...],
    measures: dict[str, np.ndarray],
) -> None:
    """Number the block's groups (in order of first appearance, as `group_ids`) and keep each group's
    values of each measure, in the kernels' order."""
    import numpy as np

    from analysis.joins.launch_join import numbered
    from analysis.stats import narrow

    if not len(keys[0]):
        return
    local, first = numbered(*keys)
    number = np.empty(len(first), dtype=np.int64)
    for i, key in enumerate(zip(*(k[first].tolist() for k in keys), strict=True)):
        g = index.get(key)
        if g is None:
            g = index[key] = len(pieces)
            pieces.append({col: [] for _, col in MEASURES})
        number[i] = g
    order = np.argsort(local, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(local, minlength=len(first)))))
    for col, values in measures.items():
        values = narrow(values[order])
        for i in range(len(first)):
            pieces[number[i]][col].append(values[bounds[i] : bounds[i + 1]].copy())


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    import numpy as np

    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _per_group(keys: dict[str, np.ndarray], measures: dict[str, np.ndarray]) -> pd.DataFrame:
    """KEYS, Count, QCount and each measure's Avg, Med, Min, Max, StdDev per group of equal keys, groups in
    order of first appearance (as groupby(sort=False)). The rows are sorted by group once and each group's
    values taken in turn: pandas' groupby of 1M kernels and four measures held ~100 MB more at its peak.
    A negative queue time is none (the kernel started before its call returned)."""
    import numpy as np
    import pandas as pd

    from analysis.stats import group_ids

    group, first = group_ids(pd.DataFrame(keys, copy=False), KEYS)
    order = np.argsort(group, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(group, minlength=len(first)))))
    del group
    rows = [_row(lambda col, g=g: measures[col][order[bounds[g] : bounds[g + 1]]]) for g in range(len(first))]
    return _frame(rows, {c: keys[c][first] for c in KEYS})


def _row(values_of: Callable[[str], np.ndarray]) -> list[object]:
    """Count, QCount and each measure's Avg, Med, Min, Max, StdDev of one group (`values_of(measure)`)."""
    import numpy as np
    import pandas as pd

    from analysis.stats import figures

    row: list[object] = [len(values_of("kernel"))]
    for letter, col in MEASURES:
        values = values_of(col)
        if letter == "Q":
            values = values[values >= 0]
            row.insert(1, len(values))
        if len(values):
            _, _, mean, median, low, high, std = figures(values)
            row += [mean, median, low, high, std]
        else:  # no queue times: nsys has NULL, and a StdDev of 0.0
            row += [np.nan, np.nan, pd.NA, pd.NA, 0.0]
    return row


def _frame(rows: list[list[object]], keys: dict[str, np.ndarray]) -> pd.DataFrame:
    """The table of `_row`s, the groups' KEYS first."""
    import numpy as np
    import pandas as pd

    from analysis.stats import round_half_up

    stat_names = [
        f"{letter}{s} (ns)" for letter, _ in MEASURES for s in ("Avg", "Med", "Min", "Max", "StdDev")
    ]
    out = pd.DataFrame(rows, columns=["Count", "QCount", *stat_names])
    for letter, _ in MEASURES:
        for s in ("Avg", "Med", "StdDev"):
            out[f"{letter}{s} (ns)"] = round_half_up(out[f"{letter}{s} (ns)"].astype(np.float64))
        for s in ("Min", "Max"):
            out[f"{letter}{s} (ns)"] = out[f"{letter}{s} (ns)"].astype("Int64" if letter == "Q" else np.int64)
    out = out.astype({"Count": np.int64, "QCount": np.int64})
    for i, c in enumerate(KEYS):
        out.insert(i, c, keys[c])
    return out


def _narrow(values: np.ndarray) -> np.ndarray:
    import numpy as np

    if len(values) and values.min() > -(2**31) and values.max() < 2**31:
        return values.astype(np.int32)
    return values


# --- the table -------------------------------------------------------------------------------------------


TABLE = frame_table(
    "launch",
    "kernel launch latency",
    launch_summary,
    summary="API, queue and kernel time per launched kernel (kernexecsum).",
    help="API, queue and kernel time per launched kernel, like `nsys stats -r kernexecsum`. Several exports: "
    "each rank's rows, one block per rank (the rows are per process and thread already).",
    mirrors="nsys stats -r kernexecsum",
    options=(TOP,),
    order=60,
    # the latencies first (total, API, queue, kernel); the API name is nearly always cudaLaunchKernel
    deciding=("Kernel Name", "TAvg (ns)", "AAvg (ns)", "QAvg (ns)", "KAvg (ns)", "Count", "QCount"),
    in_summary=InSummary(
        (("Launch latency", "kernexecsum"),),
        build=lambda by, stats_format: [launch_summary],
        options=lambda by, stats_format: {},
    ),
    example="harness launch report.sqlite --top 10",
)
