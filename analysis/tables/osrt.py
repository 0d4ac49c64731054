"""The OS runtime summary, like `nsys stats -r osrtsum` (os_runtime_sum)."""

from __future__ import annotations

import pandas as pd

from analysis.tables.cuda_api import summarize_calls
from analysis.trace.trace import Trace


def osrt_summary(trace: Trace) -> pd.DataFrame:
    """Time in each traced OS runtime function (Time (%), Total Time (ns), Num Calls, ..., Name)."""
    trace.require("osrt", "OS runtime calls")
    calls = trace.frame("osrt", ["name_id", "duration"])
    out = summarize_calls(calls, trace.strings(calls["name_id"].unique()))
    out.attrs["notes"] = list(trace.notes)
    return out
