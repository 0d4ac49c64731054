"""The OS runtime summary, like `nsys stats -r osrtsum` (os_runtime_sum): `harness osrt`. Light at import,
as every table module: the computing functions import what they compute with."""

from __future__ import annotations

from typing import TYPE_CHECKING

from analysis.tables import api
from analysis.trace.multi import named

if TYPE_CHECKING:
    import pandas as pd

    from analysis.trace.trace import Trace


def osrt_summary(trace: Trace) -> pd.DataFrame:
    """Time in each traced OS runtime function (Time (%), Total Time (ns), Num Calls, ..., Name)."""
    trace.require("osrt", "OS runtime calls")
    calls = trace.frame("osrt", ["name_id", "duration"])
    out = api.summarize_calls(calls, trace.strings(calls["name_id"].unique()))
    out.attrs["notes"] = list(trace.notes)
    return out


def osrt_rows(trace: Trace) -> pd.DataFrame:
    """One row per OS runtime call, for a table over several exports: Name, duration."""
    import pandas as pd

    trace.require("osrt", "OS runtime calls")
    calls = trace.frame("osrt", ["name_id", "duration"])
    names = named(calls["name_id"], trace.strings(calls["name_id"].unique()))
    return pd.DataFrame({"Name": names, "duration": calls["duration"].to_numpy()})


TABLE = api.calls_table(
    "osrt",
    "OS runtime calls",
    osrt_summary,
    osrt_rows,
    summary="Time in OS runtime calls (osrtsum).",
    help="Time in OS runtime calls, like `nsys stats -r osrtsum`.",
    mirrors="nsys stats -r osrtsum",
    order=70,
    in_summary=("OS runtime", "osrtsum"),
    example="harness osrt report.sqlite --top 10",
)
