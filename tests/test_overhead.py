"""Overhead table: per-phase means with and without the profiler, and the percentage."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.overhead import STEP_SUM, overhead_table


def test_overhead_table_values() -> None:
    rows = []
    for label, scale in (("no nsys", 1.0), ("nsys light", 1.5)):
        for repeat in range(2):
            for step in range(3):
                rows.append((label, repeat, step, "forward", int(100 * scale) + step))
                rows.append((label, repeat, step, "backward", int(200 * scale)))
    df = pd.DataFrame(rows, columns=["label", "repeat", "step", "phase", "duration_ns"])
    table = overhead_table(df, ["forward", "backward", "optimizer"])
    assert list(table["Phase"]) == ["forward", "backward", "optimizer", STEP_SUM]
    fwd = table.set_index("Phase").loc["forward"]
    assert fwd["no nsys Avg (ns)"] == pytest.approx(101.0)
    assert fwd["nsys light Avg (ns)"] == pytest.approx(151.0)
    assert fwd["nsys light overhead (%)"] == pytest.approx(50 / 101 * 100)
    assert fwd["no nsys StdDev (ns)"] == pytest.approx(pd.Series([100, 101, 102] * 2).std())
    step = table.set_index("Phase").loc[STEP_SUM]
    assert step["no nsys Avg (ns)"] == pytest.approx(301.0)
    assert pd.isna(table.set_index("Phase").loc["optimizer", "no nsys Avg (ns)"])
