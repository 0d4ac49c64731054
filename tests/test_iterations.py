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


def test_iterations_are_numbered_as_timeline_numbers_steps(h100_export: Path) -> None:
    """h100-medium lost its step 4 `step` range: `diff --iteration 5` showed step 6 (the fifth range after
    step 0), where `timeline --step 5` shows step 5. Iterations are numbered by the harness's step index."""
    with open_trace(h100_export) as t:
        its = find_iterations(t)
        window = its.window(5, "A")
        with sqlite3.connect(f"file:{h100_export}?mode=ro", uri=True) as con:
            (start,) = con.execute(
                "SELECT n.start FROM NVTX_EVENTS AS n JOIN StringIds AS s ON s.id = n.textId "
                "WHERE s.value = 'step' AND n.int64Value = 5"
            ).fetchone()
        assert int(window["start"].iloc[0]) == start
        assert its.ranges["number"].tolist() == [0, 1, 2, 3, *range(5, 15)]
        with pytest.raises(AnalysisError, match=r"^--iteration 4: A has no iteration 4 of its 14 iterations"):
            its.window(4, "A")


def test_profiler_steps_are_numbered_by_their_n() -> None:
    """ProfilerStep#1009..#1014: `timeline --step 1009` is the first; `diff --iteration 1009` said `only 6
    iterations (0..5)`."""
    from kineto_data import trace_path

    with open_trace(trace_path("diff-control")) as t:
        its = find_iterations(t)
        assert its.ranges["number"].tolist() == list(range(1009, 1015))
        first = its.ranges.sort_values("start").iloc[0]
        assert int(its.window(1009, "A")["start"].iloc[0]) == int(first["start"])
        with pytest.raises(AnalysisError, match=r"^--iteration 0: A has only 6 iterations \(1009\.\.1014\)"):
            its.window(0, "A")
