"""The kernel summary against `nsys stats -r gpukernsum`, name styles, merged shapes, range filter."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from export_data import as_printed, derive, newer_schema, oracle, with_harness_ranges

from analysis.errors import ExportError
from analysis.tables.kernels import KERNSUM_COLUMNS, kernel_summary
from analysis.trace.opening import open_trace


def test_equals_gpukernsum_oracle(a100_export: Path, a100_expected: Path) -> None:
    ours = kernel_summary(open_trace(a100_export))
    assert list(ours.columns) == KERNSUM_COLUMNS
    pd.testing.assert_frame_equal(as_printed(ours), oracle(a100_expected, "gpukernsum"))
    assert ours["Total Time (ns)"].iloc[0] == 88_573_480
    assert ours["GridXYZ"].iloc[0] == "   2    1    1"


def test_base_and_mangled_names(a100_export: Path) -> None:
    export = open_trace(a100_export)
    assert kernel_summary(export, names="base")["Name"].tolist() == ["saxpy"]
    assert kernel_summary(export, names="mangled")["Name"].tolist() == ["_Z5saxpyPdS_S_di"]


def test_mangled_falls_back_without_the_column(a100_export: Path, tmp_path: Path) -> None:
    export = open_trace(newer_schema(a100_export, tmp_path / "n.sqlite"))
    assert kernel_summary(export, names="mangled")["Name"].tolist() == [
        "saxpy(double *, double *, double *, double, int)"
    ]


def test_shapes_split_and_merge(a100_export: Path, tmp_path: Path) -> None:
    # two of the five launches get another grid: two rows by shape, one by name
    two = derive(
        a100_export,
        tmp_path / "shapes.sqlite",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = 70000, gridY = 3 WHERE correlationId IN (140, 156)",
    )
    export = open_trace(two)
    by_shape = kernel_summary(export)
    assert by_shape["Instances"].tolist() == [3, 2]
    assert by_shape["GridXYZ"].tolist() == ["   2    1    1", "70000    3    1"]
    assert by_shape["Total Time (ns)"].sum() == 88_573_480
    assert by_shape["Time (%)"].tolist() == [60.0, 40.0]
    by_name = kernel_summary(export, by="name")
    assert "GridXYZ" not in by_name.columns
    assert by_name["Instances"].tolist() == [5]
    assert by_name["StdDev (ns)"].tolist() == [12992.1]


def test_range_filter(a100_export: Path, tmp_path: Path) -> None:
    export = open_trace(with_harness_ranges(a100_export, tmp_path / "h.sqlite"))
    assert kernel_summary(export, range_name="forward")["Instances"].tolist() == [5]
    assert kernel_summary(export, range_name="backward").empty
    with pytest.raises(ExportError, match="no NVTX range named 'nope'"):
        kernel_summary(export, range_name="nope")


def test_no_kernels(cpu_export: Path) -> None:
    with pytest.raises(ExportError, match=r"no CUDA kernel data in .*: profile on a GPU with --trace=cuda"):
        kernel_summary(open_trace(cpu_export))
