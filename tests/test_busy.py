"""A phase's GPU-busy share from a capture (analysis.front.examine.busy_share), against the export read with
SQL."""

from __future__ import annotations

import lzma
import sqlite3
from pathlib import Path

import pytest

from analysis.front.examine import Measured, busy_share, examine
from analysis.trace.opening import open_trace
from harness.core.records import RunConfig, RunResult, StepRecord, timer_frame


def share_by_sql(export: Path, phase: str, steps: set[int] | None) -> float:
    """The same share, written out: every kernel and copy as an interval, their union merged in Python,
    clipped to each range of `phase`."""
    con = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    work = sorted(
        (start, end)
        for table in (
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET",
        )
        if table in tables
        for start, end in con.execute(f"SELECT start, end FROM {table}")
    )
    union: list[list[int]] = []
    for start, end in work:
        if union and start <= union[-1][1]:
            union[-1][1] = max(union[-1][1], end)
        else:
            union.append([start, end])
    ranges = con.execute(
        "SELECT e.start, e.end, e.int64Value FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
        "WHERE coalesce(e.text, s.value) = ? AND e.end IS NOT NULL",
        (phase,),
    ).fetchall()
    busy = wall = 0
    for start, end, step in ranges:
        if steps is not None and step not in steps:
            continue
        wall += end - start
        busy += sum(max(0, min(e, end) - max(s, start)) for s, e in union)
    return busy / wall


@pytest.mark.parametrize(("phase", "steps"), [("forward", None), ("forward", {5, 6, 7}), ("optimizer", {9})])
def test_busy_share_is_the_union_of_gpu_work_inside_the_ranges(h100_export: Path, phase, steps) -> None:
    with open_trace(h100_export) as trace:
        share = busy_share(trace, phase, steps)
    assert share == pytest.approx(share_by_sql(h100_export, phase, steps), rel=1e-12)
    assert 0 < share < 1


def test_a_capture_without_gpu_work_has_no_share(cpu_export: Path) -> None:
    with open_trace(cpu_export) as trace:
        assert busy_share(trace, "forward") is None


def test_decode_busy_is_over_the_measured_steps(h100_export: Path) -> None:
    """Over the measured steps only. The h100 capture is a train run: its forward ranges stand in for
    decode's (a train capture has no decode range, and then no share)."""
    run = RunResult(
        run_id="r", config=RunConfig(model="medium", mode="train"), status="ok",
        steps=[StepRecord(step=i, warmup=i < 10, phases={"forward": 1, "backward": 1, "optimizer": 1})
               for i in range(15)],
    )  # fmt: skip
    asked = Measured(
        timers=timer_frame(run), phases=("forward", "backward", "optimizer"), busy_of=("decode",)
    )
    seen = examine(h100_export, asked)
    assert seen.busy == {"decode": None}
    standing_in = examine(
        h100_export, Measured(timers=timer_frame(run), phases=asked.phases, busy_of=("forward",))
    )
    got = standing_in.busy["forward"]
    assert got == pytest.approx(share_by_sql(h100_export, "forward", set(range(10, 15))), rel=1e-12)
    assert got != pytest.approx(share_by_sql(h100_export, "forward", None))  # the warm-up steps left out


def test_decode_busy_of_a_generate_capture(tmp_path: Path) -> None:
    """tests/data/h100/tiny-generate (an H100 capture with generate's ranges, its last step's tokens
    CUDA-graph replays traced per node): decode's share, replayed kernels counted as any other."""
    export = tmp_path / "tiny-generate.sqlite"
    export.write_bytes(
        lzma.decompress((Path(__file__).parent / "data/h100/tiny-generate.sqlite.xz").read_bytes())
    )
    export.chmod(0o444)
    with open_trace(export, cache=False) as trace:
        share = busy_share(trace, "decode")
        prefill = busy_share(trace, "prefill")
    assert share == pytest.approx(share_by_sql(export, "decode", None), rel=1e-12)
    assert prefill == pytest.approx(share_by_sql(export, "prefill", None), rel=1e-12)
    assert 0 < share < 1 and 0 < prefill < 1
