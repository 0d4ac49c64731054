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


def _cli(*args: str | Path):  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from harness.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def test_a_range_that_launched_no_kernel_says_so(a100_export: Path) -> None:
    """`kernels --range MPI:MPI_Send` (10 ranges, no kernel launched inside): an empty table, and a note
    saying the range launched no kernel, not an empty table alone."""
    result = _cli("kernels", a100_export, "--range", "MPI:MPI_Send", "--format", "csv")
    assert result.exit_code == 0
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Time (%),Total Time (ns),Instances")  # no row
    note = " ".join(result.stderr.split())
    assert (
        "note: the NVTX range 'MPI:MPI_Send' launched no kernel (10 ranges of that name, no kernel launch "
        "call inside)" in note
    )
    assert "launched no kernel" not in _cli("kernels", a100_export, "--range", "saxpy").stderr


def test_a_range_named_as_nvtx_prints_it() -> None:
    """`harness nvtx` prints PyTorch's ranges grouped by operator (`aten::addmm` for `aten::addmm, seq = N,
    op_id = N`); `kernels --range aten::addmm` said there was no such range. It takes the printed name: the
    335 kernels launched inside those ranges, as SQL counts them."""
    from conftest import shared_export
    from export_data import query_rows

    export = shared_export("ext/torchrun_2gpu")
    listed = _cli("nvtx", export, "--format", "csv")
    assert ",PushPop,aten::addmm\n" in listed.stdout
    ((count, total),) = query_rows(
        export,
        "SELECT count(*), sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
        "AND r.globalTid >> 24 = k.globalPid >> 24 WHERE EXISTS (SELECT 1 FROM NVTX_EVENTS e "
        "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.globalTid >> 24 = r.globalTid >> 24 "
        "AND coalesce(e.text, s.value) LIKE 'aten::addmm,%' AND e.start <= r.start AND r.start < e.end)",
    )
    got = kernel_summary(open_trace(export), range_name="aten::addmm")
    ours = (int(got["Instances"].sum()), int(got["Total Time (ns)"].sum()))
    assert ours == (count, total) == (335, 57_595_448)


def test_a_kineto_gpu_range_says_which_range_to_name() -> None:
    """`harness nvtx` of a Kineto trace lists its GPU copies of ranges (`GPU:## backward ##`, on the GPU's
    timeline, where no launch call is): `--range` with one gave an empty table; it now names the range to
    give, one line and exit 1."""
    from kineto_data import trace_path

    trace = trace_path("nccl")
    assert "StartEnd,GPU:## backward ##" in _cli("nvtx", trace, "--format", "csv").stdout
    result = _cli("kernels", trace, "--range", "GPU:## backward ##")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip().splitlines() == [
        "error: 'GPU:## backward ##' is a range on the GPU's timeline (the trace's gpu_user_annotation), "
        "where no kernel is launched: name the range on the CPU, --range '## backward ##'"
    ]
    assert len(kernel_summary(open_trace(trace), range_name="## backward ##")) > 0
