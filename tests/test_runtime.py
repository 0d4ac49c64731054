"""CUDA runtime calls counted once per correlationId, and kernels joined to their launch call."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.joins.runtime import kernel_launches, plain_name, runtime_calls
from analysis.trace.opening import open_trace


def test_twice_recorded_calls_are_counted_once(a100_export: Path) -> None:
    calls = runtime_calls(open_trace(a100_export))
    assert len(calls) == 57  # 95 rows, 57 correlationIds
    names = calls["name_id"].map(calls.attrs["names"])
    assert names.value_counts()["cudaMemcpy"] == 15
    assert not names.str.contains("_v").any()
    # the plain-named call is kept: it starts first and lasts longer (it wraps the versioned one)
    memcpy = calls[calls["correlation_id"] == 138].iloc[0]
    assert (memcpy["start"], memcpy["end"] - memcpy["start"]) == (887755510, 18901405)
    assert calls.attrs["notes"] == [
        "38 CUDA runtime calls were recorded twice under one correlationId (e.g. cudaMalloc and "
        "cudaMalloc_v3020); each is counted once, under its plain name (nsys stats counts both)"
    ]


def test_plain_name() -> None:
    assert plain_name("cudaHostRegister_v4000") == "cudaHostRegister"
    assert plain_name("cudaLaunchKernel") == "cudaLaunchKernel"


def test_kernel_launches(a100_export: Path) -> None:
    k = kernel_launches(open_trace(a100_export), extra=("start",))
    assert len(k) == 5
    assert k["correlation_id"].tolist() == [140, 156, 172, 188, 204]
    assert k["call_start"].iloc[0] == 924889832  # cudaLaunchKernel, not its _v7000 twin
    assert {k.attrs["api_names"][int(i)] for i in k["api_id"]} == {"cudaLaunchKernel"}


def test_calls_of_some_correlation_ids_equal_the_whole_table_filtered(a100_export: Path) -> None:
    whole = open_trace(a100_export, cache=False)
    every = runtime_calls(whole)
    wanted = np.array([138, 140, 156, 999_999])
    part = open_trace(a100_export, cache=False)
    some = runtime_calls(part, correlation_ids=wanted)  # read a column at a time, none kept
    expected = every[every["correlation_id"].isin(wanted)].reset_index(drop=True)
    pd.testing.assert_frame_equal(some, expected)
    assert some.attrs["notes"] == every.attrs["notes"]  # still counted over every call: 38
    assert part.notes == whole.notes
    assert not part.holds("runtime", ["correlation_id"])
