"""The CUDA API summary, like `nsys stats -r cudaapisum` (cuda_api_sum), each call counted once."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.runtime import runtime_calls
from analysis.stats import describe, order_like_nsys, time_percent
from analysis.trace import Trace

APISUM_COLUMNS = [
    "Time (%)", "Total Time (ns)", "Num Calls", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
    "StdDev (ns)", "Name",
]  # fmt: skip


def summarize_calls(calls: pd.DataFrame, names: dict[int, str]) -> pd.DataFrame:
    """Time per function name (APISUM_COLUMNS), largest first, ties by string id like nsys.

    Grouped by an integer code per name, looked up once per distinct string id: a string per call (6M
    on a big export) would cost more memory than the calls themselves."""
    per_call, distinct = pd.factorize(calls["name_id"].to_numpy())
    codes, labels = pd.factorize(pd.Series(distinct).map(names).fillna("?"))
    first_id = pd.Series(distinct).groupby(codes).min()  # two ids may name one function
    data = pd.DataFrame({"code": codes[per_call], "duration": calls["duration"].to_numpy()})
    out = describe(data, ["code"], count_name="Num Calls")
    out["Name"] = labels.to_numpy()[out["code"].to_numpy()]
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
