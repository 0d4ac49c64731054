"""The OS runtime summary, like `nsys stats -r osrtsum` (os_runtime_sum)."""

from __future__ import annotations

import pandas as pd

from analysis.cuda_api import summarize_calls
from analysis.export import OSRT, Export


def osrt_summary(export: Export) -> pd.DataFrame:
    """Time in each traced OS runtime function (Time (%), Total Time (ns), Num Calls, ..., Name)."""
    export.require(OSRT, "OS runtime calls")
    calls = export.osrt_rows()
    return summarize_calls(calls, export.strings(calls["name_id"].unique()))
