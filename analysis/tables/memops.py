"""GPU memory operations, like `nsys stats -r gpumemtimesum` and `-r gpumemsizesum`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.readers import NULL
from analysis.stats import describe, order_like_nsys, round_half_up, time_percent
from analysis.tables.stats_format import DEFAULT as DEFAULT_FORMAT
from analysis.tables.stats_format import copy_label as _label
from analysis.tables.stats_format import producer
from analysis.trace.trace import Trace

MEMSET_LABEL = "[CUDA memset]"
TIME_COLUMNS = [
    "Time (%)", "Total Time (ns)", "Count", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)",
    "Operation",
]  # fmt: skip
SIZE_COLUMNS = [
    "Total (MB)", "Count", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)", "StdDev (MB)", "Operation",
]  # fmt: skip


def copy_label(kind: int, trace: Trace | None = None, stats_format: str = DEFAULT_FORMAT) -> str:
    """How `nsys stats` of `stats_format` names a copy kind (analysis.tables.stats_format): [CUDA memcpy
    HtoD] in
    2022.4, [CUDA memcpy Host-to-Device] from 2023.3."""
    return _label(kind, stats_format, producer(trace) if trace is not None else None)


MEMOP_COLUMNS = ["bytes", "start", "end", "stream_id", "correlation_id", "global_pid"]


def memory_ops(
    trace: Trace, window: tuple[int, int] | None = None, stats_format: str = DEFAULT_FORMAT
) -> pd.DataFrame:
    """Every memcpy and memset (those starting inside `window`): Operation, bytes, start, end, duration,
    stream_id, correlation_id, global_pid."""
    if trace.count("memcpy") + trace.count("memset") == 0:
        trace.require("memcpy", "GPU memory operations")
    copies = trace.frame("memcpy", ["copy_kind", *MEMOP_COLUMNS]) if trace.has("memcpy") else None
    sets = trace.frame("memset", MEMOP_COLUMNS) if trace.has("memset") else None
    parts = []
    if copies is not None:
        labels = {k: copy_label(k, trace, stats_format) for k in copies["copy_kind"].unique()}
        parts.append(copies.assign(Operation=copies["copy_kind"].map(labels)).drop(columns="copy_kind"))
    if sets is not None:
        parts.append(sets.assign(Operation=MEMSET_LABEL))
    ops = pd.concat(parts, ignore_index=True)
    ops["duration"] = ops["end"] - ops["start"]
    if window is not None:
        ops = ops[(ops["start"] >= window[0]) & (ops["start"] <= window[1])].reset_index(drop=True)
    return ops


def _by_kind(trace: Trace, value: str, stats_format: str) -> tuple[pd.DataFrame, dict[int, str]]:
    """The rows of `memory_ops` as (Operation code, `value`: duration or bytes), and code -> Operation: an
    integer per row, not a string, and only the columns the value needs (a frame of every column with a
    string per row was the peak of `summary` at 1M memory operations)."""
    if trace.count("memcpy") + trace.count("memset") == 0:
        trace.require("memcpy", "GPU memory operations")
    read = ["start", "end"] if value == "duration" else ["bytes"]
    codes, values, labels = [], [], {}
    if trace.has("memcpy"):
        copies = trace.frame("memcpy", ["copy_kind", *read])
        kind = copies["copy_kind"].to_numpy()
        labels = {int(k): copy_label(k, trace, stats_format) for k in pd.unique(kind)}
        codes.append(kind)
        values.append(_value(copies, value))
        del copies
    if trace.has("memset"):
        sets = trace.frame("memset", read)
        code = max(labels, default=-1) + 1  # a code no copy kind has
        labels[code] = MEMSET_LABEL
        codes.append(np.full(len(sets), code, dtype=np.int64))
        values.append(_value(sets, value))
        del sets
    ops = pd.DataFrame({"Operation": np.concatenate(codes), value: np.concatenate(values)}, copy=False)
    return ops, labels


def _value(ops: pd.DataFrame, value: str) -> np.ndarray:
    return (ops["end"] - ops["start"]).to_numpy() if value == "duration" else ops["bytes"].to_numpy()


def memops_time(trace: Trace, stats_format: str = DEFAULT_FORMAT) -> pd.DataFrame:
    """GPU time per memory operation kind (TIME_COLUMNS), largest first; copies named as `nsys stats` of
    `stats_format` names them."""
    ops, labels = _by_kind(trace, "duration", stats_format)
    out = describe(ops, ["Operation"], count_name="Count")
    del ops
    out["Operation"] = out["Operation"].map(labels)
    out = order_like_nsys(out, "Total Time (ns)", ["Operation"])
    out["Time (%)"] = time_percent(out["Total Time (ns)"])
    out = out[TIME_COLUMNS].astype({"Total Time (ns)": np.int64, "Count": np.int64})
    out.attrs["notes"] = list(trace.notes)
    return out


def memops_size(trace: Trace, stats_format: str = DEFAULT_FORMAT) -> pd.DataFrame:
    """Bytes moved per memory operation kind, in MB (10^6 bytes) to 3 decimals, largest first."""
    ops, labels = _by_kind(trace, "bytes", stats_format)
    bad = (ops["bytes"] == NULL) | (ops["bytes"] < 0)
    if bad.any():  # a damaged export: no byte count (the NULL sentinel would be -9.2e12 MB)
        trace.note(
            f"left out {int(bad.sum()):,} of {len(ops):,} memory operations with no byte count from the sizes"
        )
        ops = ops[~bad]
    # float64 sums: exact to 9 PB, and a huge count in a damaged export cannot wrap int64 round
    g = ops.assign(bytes=ops["bytes"].astype(np.float64)).groupby("Operation", sort=False)["bytes"]
    stats = g.agg(["sum", "size", "mean", "median", "min", "max", "std"]).reset_index()
    stats["std"] = stats["std"].fillna(0.0)
    out = pd.DataFrame(
        {
            "Operation": stats["Operation"].map(labels),
            "Count": stats["size"].astype(np.int64),
            "bytes": stats["sum"],
        }
    )
    for col, key in (("Total", "sum"), ("Avg", "mean"), ("Med", "median"), ("Min", "min"), ("Max", "max"),
                     ("StdDev", "std")):  # fmt: skip
        out[f"{col} (MB)"] = round_half_up(stats[key] / 1e6, 3)
    out = order_like_nsys(out, "bytes", ["Operation"])  # by the bytes, not their rounded MB
    out = out[SIZE_COLUMNS]
    out.attrs["notes"] = list(trace.notes)
    return out
