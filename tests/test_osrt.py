"""The OS runtime summary against osrtsum."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from export_data import as_printed, oracle

from analysis.errors import ExportError
from analysis.tables.osrt import osrt_summary
from analysis.trace.opening import open_trace


def test_osrtsum_oracle(cpu_export: Path, cpu_expected: Path) -> None:
    ours = as_printed(osrt_summary(open_trace(cpu_export)))
    pd.testing.assert_frame_equal(ours, oracle(cpu_expected, "osrtsum"))
    assert ours["Num Calls"].sum() == 10908


def test_no_osrt(a100_export: Path) -> None:
    with pytest.raises(ExportError, match=r"no OS runtime calls .*--trace=osrt"):
        osrt_summary(open_trace(a100_export))


def test_rows_name_each_distinct_id_once(h100_export: Path, series_maps: list[int]) -> None:
    """The rows a table over several exports groups (osrt_rows) made a name string for every call before
    grouping (383,808 calls here, 4.9M in a big export): they are grouped by string id, then each distinct
    id is named once. No Series as long as the calls is mapped to names; the rows' names are the calls'."""
    from export_data import query_rows

    from analysis.tables.osrt import osrt_rows

    with open_trace(h100_export) as trace:
        rows = osrt_rows(trace)
    assert len(rows) == 383_808 and max(series_maps) < 1_000
    calls = dict(
        query_rows(
            h100_export,
            "SELECT s.value, COUNT(*) FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId "
            "WHERE o.eventClass = 27 GROUP BY s.value",
        )
    )
    assert rows["Name"].value_counts().to_dict() == calls
