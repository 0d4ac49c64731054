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
