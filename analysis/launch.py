"""Launch latency per kernel, like `nsys stats -r kernexecsum` (cuda_kern_exec_sum).

For each kernel and the CUDA call that launched it: API time (the call), queue time (call end to kernel
start, when the kernel started after the call returned), kernel time, and total (call start to the later
of call end and kernel end). Grouped by process, thread, device, API name and kernel name.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.runtime import kernel_launches, pid_of, tid_of
from analysis.stats import figures, group_ids, name_codes, round_half_up
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
    if not k["has_call"].all():  # a mask of all True would copy every column of 1M kernels
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
    out = out.sort_values("TAvg (ns)", ascending=False, kind="stable").reset_index(drop=True)
    out = out[[*KEYS[:3], *[c for c in out.columns if c not in KEYS], *KEYS[3:]]]
    out.attrs["notes"] = [*trace.notes, *notes]
    return out


def _per_group(keys: dict[str, np.ndarray], measures: dict[str, np.ndarray]) -> pd.DataFrame:
    """KEYS, Count, QCount and each measure's Avg, Med, Min, Max, StdDev per group of equal keys, groups in
    order of first appearance (as groupby(sort=False)). The rows are sorted by group once and each group's
    values taken in turn: pandas' groupby of 1M kernels and four measures held ~100 MB more at its peak.
    A negative queue time is none (the kernel started before its call returned)."""
    group, first = group_ids(pd.DataFrame(keys, copy=False), KEYS)
    order = np.argsort(group, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(group, minlength=len(first)))))
    del group
    rows = []
    for g in range(len(first)):
        take = order[bounds[g] : bounds[g + 1]]
        row: list[object] = [len(take)]
        for letter, col in MEASURES:
            values = measures[col][take]
            if letter == "Q":
                values = values[values >= 0]
                row.insert(1, len(values))
            if len(values):
                _, _, mean, median, low, high, std = figures(values)
                row += [mean, median, low, high, std]
            else:  # no queue times: nsys has NULL, and a StdDev of 0.0
                row += [np.nan, np.nan, pd.NA, pd.NA, 0.0]
        rows.append(row)
    del order
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
        out.insert(i, c, keys[c][first])
    return out


def _narrow(values: np.ndarray) -> np.ndarray:
    if len(values) and values.min() > -(2**31) and values.max() < 2**31:
        return values.astype(np.int32)
    return values
