"""GPU memory operations against gpumemtimesum and gpumemsizesum."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from export_data import as_printed, derive, oracle

from analysis.errors import ExportError
from analysis.tables.memops import memops_size, memops_time
from analysis.trace.opening import open_trace


def test_gpumemtimesum_oracle(a100_export: Path, a100_expected: Path) -> None:
    ours = as_printed(memops_time(open_trace(a100_export)))
    pd.testing.assert_frame_equal(ours, oracle(a100_expected, "gpumemtimesum"))


def test_gpumemsizesum_oracle(a100_export: Path, a100_expected: Path) -> None:
    ours = as_printed(memops_size(open_trace(a100_export)))
    pd.testing.assert_frame_equal(ours, oracle(a100_expected, "gpumemsizesum"))
    assert ours["Total (MB)"].tolist() == [2621.44, 1310.72]


def test_memset_rows(a100_export: Path, tmp_path: Path) -> None:
    export = open_trace(
        derive(
            a100_export,
            tmp_path / "m.sqlite",
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, streamId, "
            "correlationId, globalPid, value, bytes) VALUES (100, 1100, 0, 1, 7, 999, 0, 0, 4000000)",
        )
    )
    size = memops_size(export).set_index("Operation")
    assert size.loc["[CUDA memset]", "Total (MB)"] == 4.0
    time = memops_time(export).set_index("Operation")
    assert time.loc["[CUDA memset]", "Total Time (ns)"] == 1000


def test_no_memory_operations(cpu_export: Path) -> None:
    with pytest.raises(ExportError, match="no GPU memory operations"):
        memops_time(open_trace(cpu_export))
