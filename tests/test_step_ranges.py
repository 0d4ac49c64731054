"""The NVTX steps check holds each measured step's range against its phase ranges: a step range that ends
before its phases end (or starts after they start) is a damaged or edited export, whose gaps between steps
and per-step findings are wrong. It fails naming the step and by how much (counted here in SQL), and
`advise` refuses to rank; every whole shared export passes (tests/test_coverage.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CPU_DIR, H100_DIR, need
from export_data import derive, query_rows
from kineto_data import raw_events, write_trace
from typer.testing import CliRunner

from analysis.advice.health import capture_health
from analysis.trace.opening import open_trace
from harness.cli import app

runner = CliRunner()
RANGES = (
    "SELECT e.rowid, e.start, e.end FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
    "WHERE s.value = '{name}'"
)


def _nvtx_steps(path: Path) -> tuple[int, dict]:
    result = runner.invoke(app, ["health", str(path), "--format", "json", "--strict"])
    assert "Traceback" not in result.output
    (row,) = [r for r in json.loads(result.stdout)["health"] if r["Check"] == "NVTX steps"]
    return result.exit_code, row


def _s(ns: int) -> str:
    return f"{ns / 1e9:,.3f} s"


def _cpu_step(step: int) -> dict[str, tuple[int, int, int]]:
    """cpu-train's step `step` (its `step` ranges in time order; no payload) and its phase ranges: name ->
    (rowid, start, end)."""
    src = need(CPU_DIR / "report.sqlite")
    rowid, start, end = sorted(query_rows(src, RANGES.format(name="step")), key=lambda r: r[1])[step]
    out = {"step": (rowid, start, end)}
    for name in ("forward", "backward", "optimizer"):
        (out[name],) = [r for r in query_rows(src, RANGES.format(name=name)) if start <= r[1] < end]
    return out


@pytest.mark.parametrize("phase", ["forward", "optimizer"])
def test_a_step_range_ending_inside_its_phases_fails(tmp_path: Path, phase: str) -> None:
    """cpu-train's step 5 ends half way through its forward (its backward and optimizer then lie after it)
    or its optimizer: health failed nothing, and `advise` found a host gap between steps of the ~15 ms cut
    off (0.17 ms on the whole export). The phase that reaches past the step is named, and by how much."""
    ranges = _cpu_step(5)
    rowid = ranges["step"][0]
    _, p_start, p_end = ranges[phase]
    cut = (p_start + p_end) // 2
    path = derive(CPU_DIR / "report.sqlite", tmp_path / "cut.sqlite", f"UPDATE NVTX_EVENTS SET end = {cut} "
                  f"WHERE rowid = {rowid}")  # fmt: skip
    code, row = _nvtx_steps(path)
    assert code == 1 and row["Status"] == "fail"
    assert row["Evidence"] == (
        f"the range of 1 of 8 steps (step 5 of steps 0–7) does not hold its phase ranges: step 5's range "
        f"ends at {_s(cut)}, {(p_end - cut) / 1e6:,.3f} ms before its {phase} range ends"
    )
    advised = runner.invoke(app, ["advise", str(path)])
    assert advised.exit_code == 1 and "NVTX steps" in advised.output and "host-gap" not in advised.output


def test_a_step_range_starting_after_its_forward_starts_fails(tmp_path: Path) -> None:
    """cpu-train's step 6 starts half way through its forward: the forward range starts before it."""
    ranges = _cpu_step(6)
    _, f_start, f_end = ranges["forward"]
    late = (f_start + f_end) // 2
    path = derive(CPU_DIR / "report.sqlite", tmp_path / "late.sqlite",
                  f"UPDATE NVTX_EVENTS SET start = {late} WHERE rowid = {ranges['step'][0]}")  # fmt: skip
    code, row = _nvtx_steps(path)
    assert code == 1
    assert row["Evidence"] == (
        f"the range of 1 of 8 steps (step 6 of steps 0–7) does not hold its phase ranges: step 6's range "
        f"starts at {_s(late)}, {(late - f_start) / 1e6:,.3f} ms after its forward range starts"
    )


def _h100(name: str, step: int) -> tuple[int, int, int]:
    src = need(H100_DIR / "report.sqlite")
    (row,) = query_rows(src, RANGES.format(name=name) + f" AND e.int64Value = {step}")
    return row


def test_a_harness_step_is_held_against_the_phases_of_its_payload(tmp_path: Path) -> None:
    """h100-medium's steps carry their index as payload: step 7's range ends where its backward does, so
    its optimizer (payload 7) ends after it; and step 9's starts where its backward does. Both are named
    (the first in the evidence), each measured step counted; a warm-up step whose range is cut is not."""
    rowid7, _, _ = _h100("step", 7)
    _, _, back7 = _h100("backward", 7)
    _, _, opt7 = _h100("optimizer", 7)
    rowid9, _, _ = _h100("step", 9)
    _, back9, _ = _h100("backward", 9)
    rowid1, start1, _ = _h100("step", 1)
    path = derive(
        H100_DIR / "report.sqlite",
        tmp_path / "cut.sqlite",
        f"UPDATE NVTX_EVENTS SET end = {back7} WHERE rowid = {rowid7}",
        f"UPDATE NVTX_EVENTS SET start = {back9} WHERE rowid = {rowid9}",
        f"UPDATE NVTX_EVENTS SET end = {start1 + 1000} WHERE rowid = {rowid1}",  # warm-up: not measured
    )
    code, row = _nvtx_steps(path)
    assert code == 1
    assert row["Evidence"] == (
        "the ranges of 2 of 10 measured steps (steps 7, 9 of steps 5–14) do not hold their phase ranges: "
        f"step 7's range ends at {_s(back7)}, {(opt7 - back7) / 1e6:,.3f} ms before its optimizer range ends"
    )
    warm_only = derive(H100_DIR / "report.sqlite", tmp_path / "warm.sqlite",
                       f"UPDATE NVTX_EVENTS SET end = {start1 + 1000} WHERE rowid = {rowid1}")  # fmt: skip
    assert _nvtx_steps(warm_only)[1]["Status"] == "ok"


@pytest.mark.parametrize(("past", "status"), [(5000, "fail"), (-10, "ok")])
def test_a_kineto_phase_reaching_past_its_profiler_step(tmp_path: Path, past: int, status: str) -> None:
    """A `forward` annotation on a ProfilerStep's thread that starts inside step 1011 of diff-control and ends
    5 ms (5,000 µs) past it, into step 1012: both steps are named; one that ends inside its step nests."""
    events = raw_events("diff-control")
    step = min((e for e in events if e.get("name") == "ProfilerStep#1011"), key=lambda e: e["ts"])
    forward = dict(step, name="forward", ts=step["ts"] + 10, dur=step["dur"] - 10 + past)
    path = write_trace(tmp_path / "trace.json", [*events, forward])
    (check,) = [c for c in capture_health(open_trace(path)).checks if c.name == "NVTX steps"]
    assert check.status == status
    if status == "fail":
        assert check.evidence.startswith(
            "the ranges of 2 of 6 steps (steps 1011, 1012 of steps 1009–1014) do not hold their phase "
            "ranges: step 1011's range ends at "
        )
        assert check.evidence.endswith(", 5.000 ms before its forward range ends")
