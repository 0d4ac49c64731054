"""GPU memory operations, like `nsys stats -r gpumemtimesum` and `-r gpumemsizesum`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.export import MEMCPY, MEMSET, Export
from analysis.stats import describe, order_like_nsys, round_half_up, time_percent

# CUDA_MEMCPY_KIND (ENUM_CUDA_MEMCPY_OPER in newer exports), as nsys stats labels them
COPY_KINDS = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
    9: "HtoH", 10: "PtoP", 11: "Unified HtoD", 12: "Unified DtoH", 13: "Unified DtoD",
}  # fmt: skip
MEMSET_LABEL = "[CUDA memset]"
TIME_COLUMNS = [
    "Time (%)", "Total Time (ns)", "Count", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)",
    "Operation",
]  # fmt: skip
SIZE_COLUMNS = [
    "Total (MB)", "Count", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)", "StdDev (MB)", "Operation",
]  # fmt: skip


def copy_label(kind: int) -> str:
    return f"[CUDA memcpy {COPY_KINDS.get(int(kind), f'kind {kind}')}]"


def memory_ops(export: Export, window: tuple[int, int] | None = None) -> pd.DataFrame:
    """Every memcpy and memset: Operation, bytes, start, end, duration, stream_id."""
    if export.count(MEMCPY) + export.count(MEMSET) == 0:
        export.require(MEMCPY, "GPU memory operations")
    copies = export.memcpy_rows(window)
    labels = {k: copy_label(k) for k in copies["copy_kind"].unique()}
    copies = copies.assign(Operation=copies["copy_kind"].map(labels)).drop(columns="copy_kind")
    sets = export.memset_rows(window).assign(Operation=MEMSET_LABEL)
    return pd.concat([copies, sets], ignore_index=True)


def memops_time(export: Export) -> pd.DataFrame:
    """GPU time per memory operation kind (TIME_COLUMNS), largest first."""
    ops = memory_ops(export)
    out = describe(ops, ["Operation"], count_name="Count")
    out = order_like_nsys(out, "Total Time (ns)", ["Operation"])
    out["Time (%)"] = time_percent(out["Total Time (ns)"])
    return out[TIME_COLUMNS].astype({"Total Time (ns)": np.int64, "Count": np.int64})


def memops_size(export: Export) -> pd.DataFrame:
    """Bytes moved per memory operation kind, in MB (10^6 bytes) to 3 decimals, largest first."""
    ops = memory_ops(export)
    g = ops.groupby("Operation", sort=False)["bytes"]
    stats = g.agg(["sum", "size", "mean", "median", "min", "max", "std"]).reset_index()
    stats["std"] = stats["std"].fillna(0.0)
    out = pd.DataFrame({"Operation": stats["Operation"], "Count": stats["size"].astype(np.int64)})
    for col, key in (("Total", "sum"), ("Avg", "mean"), ("Med", "median"), ("Min", "min"), ("Max", "max"),
                     ("StdDev", "std")):  # fmt: skip
        out[f"{col} (MB)"] = round_half_up(stats[key] / 1e6, 3)
    out = order_like_nsys(out, "Total (MB)", ["Operation"])
    return out[SIZE_COLUMNS]
