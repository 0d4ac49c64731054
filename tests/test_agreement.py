"""NVTX-vs-timer agreement: pairing by payload, by order, and on the real cpu-train export."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis.compare.agreement import agreement_table, pair_ranges, range_summary

PHASES = ("forward", "backward", "optimizer")


def timers_frame(records: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(
        [(r["step"], p, r[f"{p}_ns"], r["warmup"]) for r in records for p in PHASES],
        columns=["step", "phase", "duration_ns", "warmup"],
    )


def test_pairs_by_payload_and_ignores_warmup() -> None:
    timers = pd.DataFrame(
        [(s, "forward", 1000 + s, s < 2) for s in range(5)],
        columns=["step", "phase", "duration_ns", "warmup"],
    )
    # ranges out of order on purpose: pairing must follow the payload, not the order
    ranges = pd.DataFrame(
        {
            "name": ["forward"] * 5,
            "start_ns": [50, 10, 20, 30, 40],
            "duration_ns": [1104, 1000, 1001, 1102, 1103],
            "payload": pd.array([4, 0, 1, 2, 3], dtype="Int64"),
        }
    )
    pairing = pair_ranges(timers, ranges, ["forward"])
    assert list(pairing.pairs["step"]) == [2, 3, 4]
    assert list(pairing.pairs["nvtx_ns"]) == [1102, 1103, 1104]
    table = agreement_table(pairing, ["forward"])
    row = table.iloc[0]
    assert row["steps"] == 3
    assert row["timer_mean_ns"] == pytest.approx(1003.0)
    assert row["nvtx_mean_ns"] == pytest.approx(1103.0)
    assert row["rel_diff"] == pytest.approx(100 / 1003)
    assert pairing.notes == []


def test_late_capture_without_payload_pairs_the_last_steps() -> None:
    timers = pd.DataFrame(
        [(s, "forward", 100 * (s + 1), s < 1) for s in range(4)],
        columns=["step", "phase", "duration_ns", "warmup"],
    )
    ranges = pd.DataFrame({"name": ["forward"] * 3, "start_ns": [1, 2, 3], "duration_ns": [201, 301, 401]})
    pairs = pair_ranges(timers, ranges, ["forward"]).pairs
    assert list(zip(pairs["step"], pairs["timer_ns"], pairs["nvtx_ns"], strict=True)) == [
        (1, 200, 201),
        (2, 300, 301),
        (3, 400, 401),
    ]


def test_missing_and_repeated_ranges_are_reported() -> None:
    timers = pd.DataFrame(
        [(s, "forward", 100, False) for s in range(3)], columns=["step", "phase", "duration_ns", "warmup"]
    )
    ranges = pd.DataFrame(
        {
            "name": ["forward"] * 3,
            "start_ns": [1, 2, 3],
            "duration_ns": [100, 100, 100],
            "payload": pd.array([0, 0, 1], dtype="Int64"),
        }
    )
    notes = pair_ranges(timers, ranges, ["forward", "backward"]).notes
    assert any("more than once in step(s) 0" in n for n in notes)
    assert any("1 measured step(s) have no 'forward'" in n for n in notes)


def test_cpu_train_fixture_agrees(cpu_export, cpu_expected) -> None:
    """The real export and the timers.json written by the same process: the figures in shared/README."""
    from analysis.tables.nvtx import nvtx_ranges
    from analysis.trace.opening import open_trace

    records = json.loads((cpu_export.parent / "timers.json").read_text())
    ranges = nvtx_ranges(open_trace(cpu_export), names=["step", *PHASES])
    # all 8 steps, warmup included, as the fixture's README quotes them
    all_steps = timers_frame([{**r, "warmup": False} for r in records])
    table = agreement_table(pair_ranges(all_steps, ranges, PHASES), PHASES).set_index("phase")
    assert table.loc["forward", "steps"] == 8
    assert table.loc["forward", "nvtx_mean_ns"] == pytest.approx(19_376_537.6, abs=0.1)  # nvtxsum oracle
    assert table.loc["forward", "timer_mean_ns"] / 1e6 == pytest.approx(19.400, abs=0.0005)
    assert abs(table.loc["forward", "rel_diff"]) < 0.002  # within 0.2%, as the issue quotes
    # its timers also span the NVTX push/pop (tens of µs): 0.8% of the 3 ms optimizer phase
    assert abs(table["rel_diff"]).max() < 0.01
    # measured steps only: NVTX means equal the oracle's per-instance trace for steps 3..7
    trace = pd.read_csv(cpu_expected / "nvtxpptrace.csv")
    measured = agreement_table(pair_ranges(timers_frame(records), ranges, PHASES), PHASES).set_index("phase")
    for phase in PHASES:
        oracle = trace.loc[trace["Name"] == phase, "Duration (ns)"].iloc[3:]
        assert measured.loc[phase, "steps"] == 5
        assert measured.loc[phase, "nvtx_mean_ns"] == pytest.approx(oracle.mean())


def test_range_summary_matches_nvtxsum_oracle(cpu_export, cpu_expected) -> None:
    from analysis.tables.nvtx import nvtx_ranges
    from analysis.trace.opening import open_trace

    ranges = nvtx_ranges(open_trace(cpu_export), names=["step", *PHASES])
    ours = range_summary(ranges)
    oracle = pd.read_csv(cpu_expected / "nvtxsum.csv")
    assert list(ours["Range"]) == list(oracle["Range"])
    assert list(ours["Total Time (ns)"]) == list(oracle["Total Time (ns)"])
    assert list(ours["Instances"]) == list(oracle["Instances"])
    assert list(ours["Med (ns)"]) == list(oracle["Med (ns)"])
    assert list(ours["StdDev (ns)"].round(1)) == list(oracle["StdDev (ns)"])
