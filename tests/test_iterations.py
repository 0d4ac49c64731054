"""analysis.compare.iterations on the real CPU capture: which ranges, warm-up, windows, errors."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from analysis.compare.iterations import find_iterations, in_windows
from analysis.errors import AnalysisError
from analysis.trace.opening import open_trace


def step_ranges(path: Path) -> list[tuple[int, int]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        return con.execute(
            "SELECT n.start, n.end FROM NVTX_EVENTS AS n JOIN StringIds AS s ON s.id = n.textId "
            "WHERE s.value = 'step' ORDER BY n.start"
        ).fetchall()


def test_step_ranges_warm_up_and_windows(cpu_export: Path) -> None:
    steps = step_ranges(cpu_export)
    with open_trace(cpu_export) as t:
        its = find_iterations(t, warmup=3)
        assert (its.source, its.count, its.warmup) == ("NVTX `step` ranges", 5, 3)
        assert its.durations.tolist() == [e - s for s, e in steps[3:]]
        assert its.ranges["warmup"].tolist() == [True] * 3 + [False] * 5
        w = its.window(0, "A")  # from 0, warm-up included
        assert (int(w["start"].iloc[0]), int(w["end"].iloc[0])) == steps[0]
        pid = int(w["pid"].iloc[0])
        (s0, e0), (s1, _) = steps[0], steps[1]
        # a window holds its start, not its end, and only its own process
        inside = in_windows(np.array([pid, pid, pid, pid + 1]), np.array([s0, e0, s1, s0]), w)
        assert inside.tolist() == [True, False, False, False]
        forward = find_iterations(t, "forward")
        assert forward.source == "NVTX ranges `forward`" and forward.count == 8
        with pytest.raises(AnalysisError, match=r"^--iteration 8: A has only 8 iterations \(0\.\.7\)"):
            its.window(8, "A")
        with pytest.raises(AnalysisError, match=r"^--iteration-range nope: no NVTX range of that name in B$"):
            find_iterations(t, "nope", label="B")


def test_no_iteration_ranges(a100_export: Path) -> None:
    with open_trace(a100_export) as t:
        its = find_iterations(t)
    assert (its.source, its.count, len(its.ranges)) == ("", 0, 0)
