"""Events against many windows at once (analysis.intervals) give what comparing every event with every
window gives: counts, sums, membership and clipped time, on windows that overlap, nest, are empty or end
before they start, over several processes, with times as integers and as floats."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.intervals import clipped_sums, covered, covered_any, in_windows, slices

PIDS = np.array([1 << 24, 2 << 24, 7 << 24], dtype=np.int64)


def _events(rng: np.random.Generator, n: int, clock: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.choice(PIDS, n), clock + rng.integers(0, 1000, n)


def _windows(rng: np.random.Generator, n: int, clock: int) -> pd.DataFrame:
    start = clock + rng.integers(-50, 1050, n)
    end = start + rng.integers(-20, 300, n)  # some end before they start, some are empty
    end[:3] = start[:3]
    return pd.DataFrame({"pid": rng.choice(PIDS, n), "start": start, "end": end})


@pytest.mark.parametrize("clock", [0, 1_700_000_000_000_000_000])  # nsys's clock; Kineto's epoch in ns
@pytest.mark.parametrize("seed", range(4))
def test_counts_and_sums_in_windows_equal_a_comparison_per_window(seed: int, clock: int) -> None:
    rng = np.random.default_rng(seed)
    pid, t = _events(rng, 3000, clock)
    weight = rng.integers(0, 500, len(t))
    flag = rng.random(len(t)) < 0.3
    windows = _windows(rng, 200, clock)
    got = in_windows(pid, t, {"n": None, "weight": weight, "flag": flag}, windows)
    for i, (p, s, e) in enumerate(zip(windows["pid"], windows["start"], windows["end"], strict=True)):
        hit = (pid == p) & (t >= s) & (t < e)
        assert (got["n"][i], got["weight"][i], got["flag"][i]) == (
            hit.sum(),
            weight[hit].sum(),
            flag[hit].sum(),
        )
    order, lo, hi = slices(pid, t, windows)
    for i, (p, s, e) in enumerate(zip(windows["pid"], windows["start"], windows["end"], strict=True)):
        assert sorted(order[lo[i] : hi[i]]) == list(np.flatnonzero((pid == p) & (t >= s) & (t < e)))
    assert (got["n"] > 0).any() and (got["n"] == 0).any()


def test_float_times_compare_as_floats() -> None:
    """Times of GPU work whose launch call was lost are floats (NaN where lost): they are compared with the
    windows' integer bounds as floats, as pandas compares them."""
    rng = np.random.default_rng(5)
    clock = 1_700_000_000_000_000_000
    pid, t = _events(rng, 2000, clock)
    windows = _windows(rng, 100, clock)
    as_float = t.astype(np.float64)
    got = in_windows(pid, as_float, {"n": None}, windows)["n"]
    for i, (p, s, e) in enumerate(zip(windows["pid"], windows["start"], windows["end"], strict=True)):
        assert got[i] == ((pid == p) & (as_float >= s) & (as_float < e)).sum()


@pytest.mark.parametrize("seed", range(4))
def test_covered_equals_a_comparison_per_span(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pid, t = _events(rng, 3000, 0)
    w = _windows(rng, 60, 0)
    spans = list(zip(w["start"], w["end"], w["pid"], strict=True))
    mine, anyone = np.zeros(len(t), dtype=bool), np.zeros(len(t), dtype=bool)
    for s, e, p in spans:
        mine |= (pid == p) & (t >= s) & (t < e)
        anyone |= (t >= s) & (t < e)
    assert (covered(pid, t, spans) == mine).all() and mine.any() and not mine.all()
    assert (covered_any(t, [(s, e) for s, e, _ in spans]) == anyone).all()
    assert not covered(pid, t, []).any()


@pytest.mark.parametrize("clock", [0, 1_700_000_000_000_000_000])
@pytest.mark.parametrize("seed", range(4))
def test_clipped_sums_equal_numpy_clip_per_window(seed: int, clock: int) -> None:
    rng = np.random.default_rng(seed)
    starts = clock + rng.integers(0, 1000, 500)
    ends = starts + rng.integers(0, 100, 500)  # overlapping, as the harness's idle and its step gaps may
    w = _windows(rng, 200, clock)
    lo, hi = w["start"].to_numpy(), w["end"].to_numpy()
    want = [int((np.clip(ends, a, b) - np.clip(starts, a, b)).sum()) for a, b in zip(lo, hi, strict=True)]
    got = clipped_sums(starts, ends, lo, hi)
    assert got.tolist() == want and any(want) and 0 in want
    assert clipped_sums(starts[:0], ends[:0], lo, hi).tolist() == [0] * len(lo)
