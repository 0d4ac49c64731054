"""The CUDA kernel summary, like `nsys stats -r gpukernsum` (cuda_gpu_kern_sum in newer nsys)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from analysis.readers import NULL
from analysis.runtime import kernel_rows
from analysis.stats import describe, order_like_nsys, time_percent
from analysis.trace import Trace

KERNSUM_COLUMNS = [
    "Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
    "StdDev (ns)", "GridXYZ", "BlockXYZ", "Name",
]  # fmt: skip

Names = Literal["demangled", "base", "mangled"]
By = Literal["shape", "name"]


def dims_text(packed: pd.Series, shifts: tuple[int, int], masks: tuple[int, int]) -> pd.Series:
    """'%4d %4d %4d' of dimensions packed as (x << s0) + (y << s1) + z, the way nsys prints them."""
    values = packed.to_numpy()
    x = values >> shifts[0]
    y = (values >> shifts[1]) & masks[0]
    z = values & masks[1]
    text = [f"{a:4d} {b:4d} {c:4d}" for a, b, c in zip(x, y, z, strict=True)]
    unknown = values == NULL  # present in the trace but not three dimensions (a Kineto grid of "zz")
    if unknown.any():
        text = ["unknown" if u else t for u, t in zip(unknown.tolist(), text, strict=True)]
    return pd.Series(text, index=packed.index)


def grid_text(packed: pd.Series) -> pd.Series:
    return dims_text(packed, (32, 16), (0xFFFF, 0xFFFF))


def block_text(packed: pd.Series) -> pd.Series:
    return dims_text(packed, (22, 11), (0x7FF, 0x7FF))


def kernel_summary(
    trace: Trace, *, names: Names = "demangled", by: By = "shape", range_name: str | None = None
) -> pd.DataFrame:
    """GPU time per kernel (and launch shape), largest first, in the columns of gpukernsum.

    names: demangled (default), base (no arguments or templates) or mangled (falls back to demangled
    where the export has no mangled names). by="name" merges launch shapes (no GridXYZ/BlockXYZ).
    range_name keeps only kernels launched while an NVTX range of that name was open in their process.
    """
    trace.require("kernels", "CUDA kernel data")
    notes: list[str] = []
    if range_name is None:
        kern = kernel_rows(trace, ("name_id", "grid", "block", "duration"), names=names)
    else:
        from analysis.nvtx_gpu import kernels_in_ranges

        kern = kernels_in_ranges(trace, range_name, names=names, extra=("grid", "block"))
        notes += kern.attrs.get("notes", [])
    keys = ["name_id", "grid", "block"] if by == "shape" else ["name_id"]
    out = describe(kern, keys)
    strings = trace.strings(out["name_id"].unique())
    out["Name"] = out["name_id"].map(strings).fillna("").astype(object)
    columns = KERNSUM_COLUMNS
    if by == "shape":
        out["GridXYZ"] = grid_text(out["grid"])
        out["BlockXYZ"] = block_text(out["block"])
        out = order_like_nsys(out, "Total Time (ns)", ["name_id", "GridXYZ", "BlockXYZ"])
    else:
        out = order_like_nsys(out, "Total Time (ns)", ["name_id"])
        columns = [c for c in KERNSUM_COLUMNS if c not in ("GridXYZ", "BlockXYZ")]
    out["Time (%)"] = time_percent(out["Total Time (ns)"])
    out = out[columns].astype({"Total Time (ns)": np.int64, "Instances": np.int64})
    out.attrs["notes"] = [*trace.notes, *notes]
    return out
