"""Launch latency per kernel, like `nsys stats -r kernexecsum` (cuda_kern_exec_sum).

For each kernel and the CUDA call that launched it: API time (the call), queue time (call end to kernel
start, when the kernel started after the call returned), kernel time, and total (call start to the later
of call end and kernel end). Grouped by process, thread, device, API name and kernel name.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.runtime import kernel_launches, pid_of, tid_of
from analysis.stats import name_codes, round_half_up
from analysis.trace import Trace

MEASURES = (("T", "total"), ("A", "api"), ("Q", "queue"), ("K", "kernel"))
KEYS = ["PID", "TID", "DevId", "API Name", "Kernel Name"]


def launch_summary(trace: Trace) -> pd.DataFrame:
    """Columns as kernexecsum: PID, TID, DevId, Count, QCount, then Avg/Med/Min/Max/StdDev (ns) of
    T(otal), A(PI), Q(ueue) and K(ernel) time, API Name, Kernel Name; largest TAvg first."""
    trace.require("kernels", "CUDA kernel data")
    trace.require("runtime", "CUDA runtime calls (needed for launch latency)")
    k = kernel_launches(trace, extra=("start", "end", "device_id"))
    notes, api = k.attrs["notes"], k.attrs["api_names"]
    k = k[k["has_call"]]
    call_start = k["call_start"].to_numpy()
    call_end = k["call_end"].to_numpy()
    queue = k["start"].to_numpy() - call_end
    # grouped by integer codes, named after: a string per row (1M kernels) costs far more
    api_code, api_names, _ = name_codes(k["api_id"], api)
    kernel_code, kernel_names, _ = name_codes(k["name_id"], trace.strings(k["name_id"].unique()))
    data = pd.DataFrame(
        {
            "PID": pid_of(k["global_tid"]),
            "TID": tid_of(k["global_tid"]),
            "DevId": k["device_id"].to_numpy(),
            "API Name": api_code,
            "Kernel Name": kernel_code,
            "total": np.maximum(call_end, k["end"].to_numpy()) - call_start,
            "api": call_end - call_start,
            "queue": np.where(queue >= 0, queue, np.nan),
            "kernel": k["duration"].to_numpy(),
        }
    )
    named = (api_code >= 0) & (kernel_code >= 0)  # code -1: no name (dropped, as groupby drops NaN keys)
    if not named.all():
        data = data[named]
    g = data.groupby(KEYS, sort=False)
    out = g.size().rename("Count").to_frame()
    out["QCount"] = g["queue"].count()
    for letter, col in MEASURES:
        stats = g[col].agg(["mean", "median", "min", "max", "std"])
        stats["std"] = stats["std"].where(g[col].count() > 1, 0.0)  # nsys: 0.0, also with no values
        out[f"{letter}Avg (ns)"] = round_half_up(stats["mean"])
        out[f"{letter}Med (ns)"] = round_half_up(stats["median"])
        out[f"{letter}Min (ns)"] = stats["min"].astype("Int64" if letter == "Q" else np.int64)
        out[f"{letter}Max (ns)"] = stats["max"].astype("Int64" if letter == "Q" else np.int64)
        out[f"{letter}StdDev (ns)"] = round_half_up(stats["std"])
    out = out.reset_index()
    out["API Name"] = api_names[out["API Name"].to_numpy()]
    out["Kernel Name"] = kernel_names[out["Kernel Name"].to_numpy()]
    out = out.sort_values("TAvg (ns)", ascending=False, kind="stable").reset_index(drop=True)
    out = out[[*KEYS[:3], *[c for c in out.columns if c not in KEYS], *KEYS[3:]]]
    out.attrs["notes"] = [*trace.notes, *notes]
    return out
