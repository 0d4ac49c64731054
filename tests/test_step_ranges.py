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


def _advise_refuses(path: Path) -> None:
    advised = runner.invoke(app, ["advise", str(path)])
    assert advised.exit_code == 1 and "no findings ranked" in advised.output
    assert "NVTX steps" in advised.output


@pytest.mark.parametrize("side", ["ends before", "starts after"])
def test_a_step_range_holding_none_of_its_phases_fails(tmp_path: Path, side: str) -> None:
    """cpu-train's step 5 ends 1 µs before its forward starts, or starts 1 µs after its optimizer ends: its
    phases then lie in no step (cpu-train's steps are numbered by time). The phase that lies outside is named
    with the step beside it that lacks it."""
    ranges = _cpu_step(5)
    rowid, _, _ = ranges["step"]
    if side == "ends before":
        sql = f"UPDATE NVTX_EVENTS SET end = {ranges['forward'][1] - 1000} WHERE rowid = {rowid}"
    else:
        sql = f"UPDATE NVTX_EVENTS SET start = {ranges['optimizer'][2] + 1000} WHERE rowid = {rowid}"
    path = derive(CPU_DIR / "report.sqlite", tmp_path / "none.sqlite", sql)
    code, row = _nvtx_steps(path)
    assert code == 1 and row["Status"] == "fail"
    where = "after" if side == "ends before" else "before"
    assert row["Evidence"] == (
        f"the forward range from {_s(ranges['forward'][1])} lies in no step range, {where} step 5's, and "
        "step 5 holds no forward range while other steps hold one (the range of step 5 or of that forward "
        "was moved) (3 phase ranges in no step in all)"
    )
    _advise_refuses(path)


def test_a_harness_step_range_ending_before_its_first_phase_says_it_holds_none(tmp_path: Path) -> None:
    """h100-medium's step 7 ends half way from its start to its forward's: the launch calls of step 7 lie in
    no step range, but it is the step's range that is wrong, not NVTX lost: the step and its first phase are
    named."""
    rowid, start, _ = _h100("step", 7)
    _, f_start, _ = _h100("forward", 7)
    end = (start + f_start) // 2
    path = derive(H100_DIR / "report.sqlite", tmp_path / "none.sqlite",
                  f"UPDATE NVTX_EVENTS SET end = {end} WHERE rowid = {rowid}")  # fmt: skip
    code, row = _nvtx_steps(path)
    assert code == 1
    assert row["Evidence"] == (
        "the range of 1 of 10 measured steps (step 7 of steps 5–14) does not hold its phase ranges: step 7's "
        f"range ends at {_s(end)}, {(f_start - end) / 1e6:,.3f} ms before its first phase range (forward) "
        "starts: it holds none of them"
    )


def test_overlapping_step_ranges_fail_naming_both(tmp_path: Path) -> None:
    """cpu-train's step 5 ends where step 6's forward ends: step 6 starts inside it, on one thread. Every
    phase still lies in a step; it fails naming both steps and by how much."""
    step5, step6 = _cpu_step(5), _cpu_step(6)
    end = step6["forward"][2]
    path = derive(CPU_DIR / "report.sqlite", tmp_path / "overlap.sqlite",
                  f"UPDATE NVTX_EVENTS SET end = {end} WHERE rowid = {step5['step'][0]}")  # fmt: skip
    code, row = _nvtx_steps(path)
    assert code == 1
    assert row["Evidence"] == (
        f"step ranges overlap: step 6's range starts at {_s(step6['step'][1])}, "
        f"{(end - step6['step'][1]) / 1e6:,.3f} ms before step 5's range ends"
    )
    _advise_refuses(path)


def test_overlapping_harness_step_ranges_fail(tmp_path: Path) -> None:
    """h100-medium's step 7 (payload 7) ends where step 8's forward ends: each phase is still in the step of
    its payload, so nothing else fails."""
    rowid7, _, _ = _h100("step", 7)
    _, start8, _ = _h100("step", 8)
    _, _, f_end8 = _h100("forward", 8)
    path = derive(H100_DIR / "report.sqlite", tmp_path / "overlap.sqlite",
                  f"UPDATE NVTX_EVENTS SET end = {f_end8} WHERE rowid = {rowid7}")  # fmt: skip
    code, row = _nvtx_steps(path)
    assert code == 1
    assert row["Evidence"] == (
        f"step ranges overlap: step 8's range starts at {_s(start8)}, {(f_end8 - start8) / 1e6:,.3f} ms "
        "before step 7's range ends"
    )


def test_a_step_range_lasting_no_time_fails(tmp_path: Path) -> None:
    """cpu-train's step 5 ends where it starts."""
    rowid, start, _ = _cpu_step(5)["step"]
    path = derive(CPU_DIR / "report.sqlite", tmp_path / "zero.sqlite",
                  f"UPDATE NVTX_EVENTS SET end = start WHERE rowid = {rowid}")  # fmt: skip
    code, row = _nvtx_steps(path)
    assert code == 1
    assert row["Evidence"] == f"step 5's range lasts no time: it starts and ends at {_s(start)}"
    _advise_refuses(path)


def test_harness_steps_out_of_order_fail(tmp_path: Path) -> None:
    """h100-medium's steps 7 and 8 swap payloads (step ranges and phases alike): every step still holds its
    phases, in the order `steps 5, 6, 8, 7, 9, …`."""
    _, start7, _ = _h100("step", 7)
    _, start8, _ = _h100("step", 8)
    swap = "UPDATE NVTX_EVENTS SET int64Value = 15 - int64Value WHERE int64Value IN (7, 8)"
    path = derive(H100_DIR / "report.sqlite", tmp_path / "swap.sqlite", swap)
    code, row = _nvtx_steps(path)
    assert code == 1
    assert row["Evidence"] == (
        f"the step ranges are out of order: step 8's range starts at {_s(start7)}, before step 7's (at "
        f"{_s(start8)})"
    )
    _advise_refuses(path)


@pytest.mark.parametrize(("was", "made"), [(14, 13), (5, 3)])
def test_a_step_number_recorded_twice_fails(tmp_path: Path, was: int, made: int) -> None:
    """h100-medium's step 14 (all four ranges) carries payload 13, or its first measured step 5 payload 3
    (a warm-up step's number): the two steps would be read as one, leaving 9 measured steps."""
    _, start_made, _ = _h100("step", made)
    _, start_was, _ = _h100("step", was)
    path = derive(H100_DIR / "report.sqlite", tmp_path / "twice.sqlite",
                  f"UPDATE NVTX_EVENTS SET int64Value = {made} WHERE int64Value = {was}")  # fmt: skip
    code, row = _nvtx_steps(path)
    assert code == 1
    assert row["Evidence"].startswith(
        f"step {made} has 2 step ranges in one process, from {_s(start_made)} and {_s(start_was)}"
    )


def test_a_phase_moved_out_of_its_step_fails_and_an_extra_one_between_steps_does_not(tmp_path: Path) -> None:
    """cpu-train's step 5 optimizer moved into the gap between steps 5 and 6: step 5 holds none while the
    other steps do. A forward range in the same gap beside steps that each hold their
    own (an evaluation pass between training steps) is a program's, not a fault."""
    step5, step6 = _cpu_step(5), _cpu_step(6)
    gap_start, gap_end = step5["step"][2] + 1000, step6["step"][1] - 1000
    moved = derive(CPU_DIR / "report.sqlite", tmp_path / "moved.sqlite",
                   f"UPDATE NVTX_EVENTS SET start = {gap_start}, end = {gap_end} "
                   f"WHERE rowid = {step5['optimizer'][0]}")  # fmt: skip
    code, row = _nvtx_steps(moved)
    assert code == 1
    assert row["Evidence"] == (
        f"the optimizer range from {_s(gap_start)} lies in no step range, after step 5's, and step 5 holds "
        "no optimizer range while other steps hold one (the range of step 5 or of that optimizer was moved)"
    )
    extra = derive(
        CPU_DIR / "report.sqlite", tmp_path / "extra.sqlite",
        "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId, domainId) SELECT "
        f"{gap_start}, {gap_end}, eventType, globalTid, textId, domainId FROM NVTX_EVENTS "
        f"WHERE rowid = {step5['forward'][0]}",
    )  # fmt: skip
    assert _nvtx_steps(extra) == (0, _nvtx_steps(CPU_DIR / "report.sqlite")[1])


def test_overlapping_profiler_steps_fail(tmp_path: Path) -> None:
    """diff-control's ProfilerStep#1011 made to end 5 ms (5,000 µs) after step 1012 starts."""
    events = raw_events("diff-control")
    steps = {e["name"]: e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
    s1011, s1012 = steps["ProfilerStep#1011"], steps["ProfilerStep#1012"]
    longer = dict(s1011, dur=s1012["ts"] - s1011["ts"] + 5000)
    path = write_trace(tmp_path / "trace.json", [e for e in events if e is not s1011] + [longer])
    (check,) = [c for c in capture_health(open_trace(path)).checks if c.name == "NVTX steps"]
    assert check.status == "fail"
    assert check.evidence.startswith("step ranges overlap: step 1012's range starts at ")
    assert check.evidence.endswith(", 5.000 ms before step 1011's range ends")


def test_overlapping_phase_ranges_of_a_harness_step_fail(tmp_path: Path) -> None:
    """h100-medium's step 7 forward made to end half way through its backward: both lie in step 7, and the
    split by phase would count the overlap twice."""
    rowid, _, _ = _h100("forward", 7)
    _, b_start, b_end = _h100("backward", 7)
    end = (b_start + b_end) // 2
    path = derive(H100_DIR / "report.sqlite", tmp_path / "overlap.sqlite",
                  f"UPDATE NVTX_EVENTS SET end = {end} WHERE rowid = {rowid}")  # fmt: skip
    code, row = _nvtx_steps(path)
    assert code == 1
    assert row["Evidence"] == (
        f"step 7's forward and backward ranges overlap: its backward range starts at {_s(b_start)}, "
        f"{(end - b_start) / 1e6:,.3f} ms before its forward range ends"
    )
    _advise_refuses(path)


def test_harness_phases_out_of_order_fail(tmp_path: Path) -> None:
    """h100-medium's step 7 with its forward and backward ranges swapping names: each still lies in its step,
    whose backward then runs before its forward."""
    f_rowid, f_start, _ = _h100("forward", 7)
    b_rowid, b_start, _ = _h100("backward", 7)
    names = f"SELECT rowid, textId FROM NVTX_EVENTS WHERE rowid IN ({f_rowid}, {b_rowid})"
    ids = dict(query_rows(H100_DIR / "report.sqlite", names))
    path = derive(
        H100_DIR / "report.sqlite", tmp_path / "order.sqlite",
        f"UPDATE NVTX_EVENTS SET textId = {ids[b_rowid]} WHERE rowid = {f_rowid}",
        f"UPDATE NVTX_EVENTS SET textId = {ids[f_rowid]} WHERE rowid = {b_rowid}",
    )  # fmt: skip
    code, row = _nvtx_steps(path)
    assert code == 1
    assert row["Evidence"] == (
        f"step 7's phase ranges are out of order: its backward range (from {_s(f_start)}) comes before its "
        f"forward range (from {_s(b_start)})"
    )


@pytest.mark.parametrize("end", ["before its forward", "at its start"])
def test_gpu_coverage_leaves_a_step_whose_range_is_broken_to_nvtx_steps(tmp_path: Path, end: str) -> None:
    """h100-medium's step 7 range ends half way to its forward, or where it starts: its launch calls lie
    outside it. The step's range is at fault, not the CUDA trace: GPU coverage judges the other 9 measured
    steps and names step 7 as not judged; NVTX steps fails it, and the capture with it."""
    rowid, start, _ = _h100("step", 7)
    _, f_start, _ = _h100("forward", 7)
    to = (start + f_start) // 2 if end == "before its forward" else start
    path = derive(H100_DIR / "report.sqlite", tmp_path / "broken.sqlite",
                  f"UPDATE NVTX_EVENTS SET end = {to} WHERE rowid = {rowid}")  # fmt: skip
    result = runner.invoke(app, ["health", str(path), "--format", "json", "--strict"])
    assert result.exit_code == 1
    rows = {r["Check"]: r for r in json.loads(result.stdout)["health"]}
    assert rows["NVTX steps"]["Status"] == "fail"
    assert rows["GPU coverage"]["Status"] == "ok"
    assert rows["GPU coverage"]["Evidence"] == (
        "30,528 of 30,528 kernel launch calls ran; 9 steps checked, 2,700 launch calls each; warm-up steps "
        "1, 2: no launch call recorded (not measured); step 7 not judged: its step range lasts no time or "
        "does not hold its phase ranges (NVTX steps fails it), so what the range holds is not the step's work"
    )


@pytest.mark.parametrize("fixture", ["cpu-train", "h100-medium"])
def test_a_step_range_ending_before_it_starts_is_named(tmp_path: Path, fixture: str) -> None:
    """A step range made to end 1 µs before it starts (cpu-train's step 5, numbered by its place in time;
    h100-medium's step 7, by its payload): the reader leaves the row out as one that cannot be right, which
    left cpu-train's 7 other steps passing as whole and h100-medium's step 7 said to have lost its range."""
    if fixture == "cpu-train":
        rowid, start, _ = _cpu_step(5)["step"]
        src, step = CPU_DIR / "report.sqlite", 5
    else:
        rowid, start, _ = _h100("step", 7)
        src, step = H100_DIR / "report.sqlite", 7
    path = derive(src, tmp_path / "inverted.sqlite",
                  f"UPDATE NVTX_EVENTS SET end = start - 1000 WHERE rowid = {rowid}")  # fmt: skip
    code, row = _nvtx_steps(path)
    assert code == 1 and row["Status"] == "fail"
    assert row["Evidence"] == (
        f"step {step}'s range ends at {_s(start - 1000)}, 0.001 ms before it starts: a range that cannot be "
        "right, left out of every table, so the steps are read without it"
    )


@pytest.mark.parametrize(("made", "status"), [("crossing", "fail"), ("start/end", "ok"), ("nested", "ok")])
def test_crossing_push_pop_phase_ranges_of_a_plain_step_fail(tmp_path: Path, made: str, status: str) -> None:
    """cpu-train's step 5 forward (a push/pop range, no payload) made to end half way through its backward:
    two push/pop ranges of one thread cannot cross, and the split by phase would count the overlap twice. The
    same forward as a start/end range (which may overlap others) passes, and so does one made to end where
    its backward ends: it holds the whole backward, which nests."""
    ranges = _cpu_step(5)
    rowid, f_start, _ = ranges["forward"]
    _, b_start, b_end = ranges["backward"]
    end = (b_start + b_end) // 2 if made != "nested" else b_end
    sql = [f"UPDATE NVTX_EVENTS SET end = {end} WHERE rowid = {rowid}"]
    if made == "start/end":
        sql.append(f"UPDATE NVTX_EVENTS SET eventType = 60 WHERE rowid = {rowid}")
    path = derive(CPU_DIR / "report.sqlite", tmp_path / "cross.sqlite", *sql)
    code, row = _nvtx_steps(path)
    assert row["Status"] == status
    if status == "fail":
        assert code == 1
        assert row["Evidence"] == (
            f"step 5's forward and backward ranges cross on one thread: its backward range starts at "
            f"{_s(b_start)}, {(end - b_start) / 1e6:,.3f} ms before its forward range (from {_s(f_start)}) "
            "ends, and ends after it"
        )
    else:
        assert row == _nvtx_steps(CPU_DIR / "report.sqlite")[1]


@pytest.mark.parametrize("which", ["h100 step", "h100 forward", "cpu step"])
def test_a_range_never_ended_before_later_ones_is_said_to_have_lost_its_end(
    tmp_path: Path, which: str
) -> None:
    """h100-medium's step 7 range or its forward range, or cpu-train's step 5 range, with no end (NULL: a
    range never closed, which the reader runs to the trace's last NVTX time) while later ranges follow: it
    was said as step ranges (or phases) that overlap by 1,493 ms, as though both had been recorded so."""
    if which == "cpu step":
        src, step, name = CPU_DIR / "report.sqlite", 5, "step"
        rowid, _, _ = _cpu_step(5)["step"]
        _, after, _ = _cpu_step(6)["step"]
    else:
        src, step, name = H100_DIR / "report.sqlite", 7, which.split()[1]
        rowid, _, _ = _h100(name, 7)
        _, after, _ = _h100("step", 8) if name == "step" else _h100("backward", 7)
    path = derive(src, tmp_path / "open.sqlite", f"UPDATE NVTX_EVENTS SET end = NULL WHERE rowid = {rowid}")
    (last,) = query_rows(path, "SELECT max(max(start), max(ifnull(end, 0))) FROM NVTX_EVENTS")[0]
    code, row = _nvtx_steps(path)
    assert code == 1 and row["Status"] == "fail"
    ranged = "range" if name == "step" else f"{name} range"
    follows = f"step {step + 1}'s range" if name == "step" else "its backward range"
    assert row["Evidence"] == (
        f"step {step}'s {ranged} never ends (its time runs to the trace's end, {_s(last)}) while {follows} "
        f"starts after it, at {_s(after)}: its end was lost"
    )
