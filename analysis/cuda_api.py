"""The CUDA API summary, like `nsys stats -r cudaapisum` (cuda_api_sum), each call counted once."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.runtime import runtime_calls
from analysis.stats import describe, name_codes, order_like_nsys, time_percent
from analysis.trace import Trace

APISUM_COLUMNS = [
    "Time (%)", "Total Time (ns)", "Num Calls", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
    "StdDev (ns)", "Name",
]  # fmt: skip


def summarize_calls(calls: pd.DataFrame, names: dict[int, str]) -> pd.DataFrame:
    """Time per function name (APISUM_COLUMNS), largest first, ties by string id like nsys; calls grouped
    by an integer code per name (analysis.stats.name_codes)."""
    code, labels, first_id = name_codes(calls["name_id"], names, missing="?")
    data = pd.DataFrame({"code": code, "duration": calls["duration"].to_numpy()})
    out = describe(data, ["code"], count_name="Num Calls")
    out["Name"] = labels[out["code"].to_numpy()]
    out["name_id"] = first_id.reindex(out["code"]).to_numpy()
    out = order_like_nsys(out, "Total Time (ns)", ["name_id"])
    out["Time (%)"] = time_percent(out["Total Time (ns)"])
    return out[APISUM_COLUMNS].astype({"Total Time (ns)": np.int64, "Num Calls": np.int64})


def cuda_api_summary(trace: Trace) -> pd.DataFrame:
    """Time in each CUDA runtime/driver function, like cudaapisum, but a call recorded twice under one
    correlationId (name and name_vNNNN) counts once; `attrs["notes"]` says when that happened."""
    trace.require("runtime", "CUDA API calls")
    calls = runtime_calls(trace)
    out = summarize_calls(calls.assign(duration=calls["end"] - calls["start"]), calls.attrs["names"])
    out.attrs["notes"] = [*trace.notes, *calls.attrs["notes"]]
    return out
