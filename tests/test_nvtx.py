"""NVTX tables against nvtxsum, nvtxppsum and nvtxpptrace; range instances with payloads and nesting."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from export_data import as_printed, oracle, with_harness_ranges

from analysis.tables.nvtx import nvtx_pushpop_summary, nvtx_ranges, nvtx_summary, nvtx_trace
from analysis.trace.opening import open_trace


def test_nvtxsum_oracles(
    a100_export: Path, a100_expected: Path, cpu_export: Path, cpu_expected: Path
) -> None:
    for export, expected in ((a100_export, a100_expected), (cpu_export, cpu_expected)):
        ours = nvtx_summary(open_trace(export))
        pd.testing.assert_frame_equal(as_printed(ours), oracle(expected, "nvtxsum"))
    # the MPI ranges carry their domain, as nsys prints them
    assert nvtx_summary(open_trace(a100_export))["Range"].iloc[0] == "MPI:MPI_Init"


def test_nvtxppsum_oracle(cpu_export: Path, cpu_expected: Path) -> None:
    ours = nvtx_pushpop_summary(open_trace(cpu_export))
    pd.testing.assert_frame_equal(as_printed(ours), oracle(cpu_expected, "nvtxppsum"))


def test_nvtxpptrace_oracle(cpu_export: Path, cpu_expected: Path) -> None:
    ours = as_printed(nvtx_trace(open_trace(cpu_export)))
    expected = oracle(cpu_expected, "nvtxpptrace")
    expected["ParentId"] = pd.to_numeric(expected["ParentId"].replace("None", None))
    pd.testing.assert_frame_equal(ours, expected, check_dtype=False)
    assert len(ours) == 32 and ours["NumChild"].iloc[0] == 3


def test_ranges_listing(cpu_export: Path) -> None:
    ranges = nvtx_ranges(open_trace(cpu_export), names=["step", "forward"])
    assert len(ranges) == 16
    first = ranges.iloc[0]
    assert (first["name"], first["start_ns"], first["duration_ns"], first["level"]) == (
        "step",
        7178593525,
        167275973,
        0,
    )
    forward = ranges.iloc[1]
    assert forward["name"] == "forward" and forward["level"] == 1 and forward["parent"] == first["range_id"]
    assert ranges["payload"].isna().all() and ranges["pid"].eq(26286).all()


def test_payload_is_the_step_index(a100_export: Path, tmp_path: Path) -> None:
    ranges = nvtx_ranges(open_trace(with_harness_ranges(a100_export, tmp_path / "h.sqlite")), ["forward"])
    assert ranges["payload"].tolist() == [0, 1, 2, 3, 4]
    assert ranges["level"].tolist() == [1, 2, 2, 2, 2]  # step 0 is before `measured`: one level less


def test_ranges_without_a_name_are_said(cpu_export: Path, tmp_path: Path) -> None:
    """Ranges recorded with neither a text nor a registered string make a row with an empty Range, as nsys
    stats prints them; a note says why that row has no name."""
    import shutil
    import sqlite3

    export = tmp_path / "unnamed.sqlite"
    shutil.copyfile(cpu_export, export)
    export.chmod(0o644)
    con = sqlite3.connect(export)
    with con:
        con.execute(
            "UPDATE NVTX_EVENTS SET text = NULL, textId = NULL WHERE rowid IN "
            "(SELECT rowid FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start LIMIT 3)"
        )
    con.close()
    table = nvtx_summary(open_trace(export, cache=False))
    assert table.loc[table["Range"] == "", "Instances"].tolist() == [3]
    assert table.attrs["notes"] == [
        "3 ranges recorded without a name (no text, no registered string): the row whose Range is empty"
    ]
    assert nvtx_summary(open_trace(cpu_export)).attrs["notes"] == []
