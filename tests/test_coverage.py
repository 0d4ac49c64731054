"""Coverage over time (analysis/advice/coverage.py) and the kernel-names check: each fires on a capture made
broken as real GPUs break them (copies of h100-medium, export_data.broken_captures; Kineto traces with events
dropped after a step) and stays silent on every whole shared export and trace. The expected figures are
counted here in SQL or plain Python, not through the trace model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import H100_DIR, NSYS_EXPORTS, SHARED_NSYS, need, shared_export
from export_data import H100_STEP_END, derive, query_rows
from kineto_data import TRACES, cut_after_step, raw_events, trace_path, write_trace
from typer.testing import CliRunner

from analysis.advice.checks import FAIL, OK, WARN
from analysis.advice.coverage import MISSING_FAIL_PCT
from analysis.advice.findings import RunRecord
from analysis.advice.health import capture_health
from analysis.front.examine import capture_advice
from analysis.trace.opening import open_trace
from harness.cli import app

runner = CliRunner()
EXPORTS = [*NSYS_EXPORTS, "h100-medium"]
LAUNCH = re.compile(r"^(cudaLaunchKernel|cudaLaunchKernelExC|cuLaunchKernel|cuLaunchKernelEx)(_v\d+)?$")
COVERAGE = ("GPU coverage", "NVTX steps", "kernel names")


def _tables(path: Path) -> set[str]:
    return {n for (n,) in query_rows(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def _launches(path: Path) -> list[tuple[int, bool]]:
    """(start, ran) of every kernel launch call: ran when a kernel has its process and correlation id."""
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in _tables(path):
        return []
    ran = set()
    if "CUPTI_ACTIVITY_KIND_KERNEL" in _tables(path):
        ran = set(query_rows(path, "SELECT globalPid >> 24, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    rows = query_rows(
        path,
        "SELECT min(r.start), r.globalTid >> 24, r.correlationId, min(s.value) "
        "FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "GROUP BY r.globalTid, r.correlationId",
    )  # a call recorded twice under one correlationId (the A100 export's cudaLaunchKernel_v7000) once
    return sorted((start, (pid, corr) in ran) for start, pid, corr, name in rows if LAUNCH.match(name))


def _step(path: Path, step: int) -> tuple[int, int]:
    return query_rows(
        path,
        "SELECT e.start, e.end FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
        f"WHERE s.value = 'step' AND e.int64Value = {step}",
    )[0]


def _s(ns: int) -> str:
    return f"{ns / 1e9:,.3f} s"


def _checks(path: Path) -> tuple[int, dict[str, dict]]:
    """`harness health PATH --strict --format json`: its exit code and its checks by name."""
    result = runner.invoke(app, ["health", str(path), "--strict", "--format", "json"])
    assert "Traceback" not in result.output
    return result.exit_code, {r["Check"]: r for r in json.loads(result.stdout)["health"]}


def test_the_list_of_exports_is_every_shared_export() -> None:
    """The silence tests below run on every export of ../shared: one added there must be added here."""
    found = {str(p.parent.relative_to(SHARED_NSYS)) for p in SHARED_NSYS.glob("*/report.sqlite")}
    found |= {str(p.parent.relative_to(SHARED_NSYS)) for p in SHARED_NSYS.glob("ext/*/report.sqlite")}
    if not found:
        need(SHARED_NSYS / "cpu-train")  # no export at all: the corpus is missing
    assert found == set(EXPORTS)


@pytest.mark.parametrize("export", EXPORTS)
def test_whole_exports_pass_strict(export: str) -> None:
    """Every whole shared export: no check fails (`--strict` exits 0); the launch calls without a kernel,
    counted in SQL, are below the threshold and said in the evidence."""
    path = shared_export(export)
    code, checks = _checks(path)
    assert code == 0 and not [c for c in checks.values() if c["Status"] == FAIL]
    assert checks["GPU coverage"]["Status"] == OK and checks["NVTX steps"]["Status"] == OK
    calls = _launches(path)
    ran = sum(r for _, r in calls)
    if calls:
        assert 100 * (len(calls) - ran) / len(calls) < MISSING_FAIL_PCT
        assert checks["GPU coverage"]["Evidence"].startswith(
            f"{ran:,} of {len(calls):,} kernel launch calls ran"
        )
    # 20 of torchrun_2gpu's 4,006 launch calls have no kernel: its last ones (the capture stopped first)
    assert (len(calls) - ran, len(calls)) == {"ext/torchrun_2gpu": (20, 4006), "h100-medium": (0, 30528)}.get(
        export, (0, len(calls))
    )
    assert checks["kernel names"]["Status"] == (WARN if export == "h100-medium" else OK)


def test_h100_whole_capture_says_what_its_warm_up_lost() -> None:
    """h100-medium is whole over its measured steps 5–14; nsys lost CUDA in warm-up steps 1–2 and three NVTX
    ranges of steps 3–4: said, not failed (no table of measured steps uses them)."""
    code, checks = _checks(shared_export("h100-medium"))
    assert code == 0
    assert checks["GPU coverage"]["Evidence"] == (
        "30,528 of 30,528 kernel launch calls ran; 10 steps checked, 2,700 launch calls each; warm-up "
        "steps 1, 2: no launch call recorded (not measured)"
    )
    assert checks["NVTX steps"]["Evidence"] == (
        "10 measured steps (steps 5–14), each with step, forward, backward, optimizer; warm-up, not "
        "measured: step 3 lacks optimizer, step 4 lacks step, forward"
    )


@pytest.mark.parametrize("fixture", list(TRACES))
def test_whole_kineto_traces_pass(fixture: str) -> None:
    """Every launch call of the four Kineto traces has its GPU work, and no check fails (diff-test's 614 GPU
    events without their launching call were launched before the trace started: in flight, not lost)."""
    path = trace_path(fixture)
    kernels = [e for e in raw_events(fixture) if e.get("cat") == "cuda_runtime" and LAUNCH.match(e["name"])]
    code, checks = _checks(path)
    assert checks["GPU coverage"]["Status"] == OK and checks["NVTX steps"]["Status"] == OK
    failed = [name for name, c in checks.items() if c["Status"] == FAIL]
    assert (code, failed) == (0, [])
    assert checks["GPU coverage"]["Evidence"].startswith(
        f"{len(kernels):,} of {len(kernels):,} kernel launch"
    )


def test_kernels_cut_after_a_step_fail_naming_the_step_and_time(broken_h100: dict[str, Path]) -> None:
    """The trace of kernels stops after measured step 5 (as PyTorch #192021 and tritonbench #468 lost them):
    steps 6–14 launch thousands of kernels that are not in the export."""
    path = broken_h100["kernels-cut"]
    calls = _launches(path)
    start6, end6 = _step(path, 6)
    in6 = [r for t, r in calls if start6 <= t < end6]
    stop = max(t for t, r in calls if r)
    after = [t for t, _ in calls if t > stop]
    start5, end5 = _step(path, 5)
    assert start5 <= stop < end5
    code, checks = _checks(path)
    assert code == 1
    check = checks["GPU coverage"]
    assert check["Status"] == FAIL
    assert check["Evidence"] == (
        f"9 of 10 measured steps (steps 6–14 of steps 5–14) launch kernels that never ran: step 6 (from "
        f"{_s(start6)}) has "
        f"{in6.count(False):,} of {len(in6):,} launch calls without GPU work; the trace of kernels stops at "
        f"{_s(stop)} (step 5): the {len(after):,} launch calls after it, to {_s(calls[-1][0])}, have none"
    )
    assert in6.count(False) == len(in6) == 2700
    assert checks["NVTX steps"]["Status"] == OK  # NVTX is whole: only the check that should fires


def test_nvtx_cut_after_step_2_fails_naming_the_step_and_time(broken_h100: dict[str, Path]) -> None:
    """NVTX stops after step 2 while CUDA goes on, as nsys 2022.4 recorded a CUDA 13 run: the step ranges
    end at step 2's end and the launch calls of steps 3–14 follow. With no `measured` range left and no
    run's record, which steps were warm-up is not known: h100's warm-up gap in CUDA (steps 1–2) failed GPU
    coverage as if they were measured; it warns, saying so."""
    path = broken_h100["nvtx-cut"]
    _, end2 = _step(path, 2)
    last_end = query_rows(path, "SELECT max(end) FROM NVTX_EVENTS WHERE eventType = 59")[0][0]
    assert last_end == end2
    calls = _launches(path)
    after = [t for t, _ in calls if t >= end2]
    code, checks = _checks(path)
    assert code == 1
    assert checks["NVTX steps"]["Status"] == FAIL
    assert checks["NVTX steps"]["Evidence"] == (
        f"the step ranges stop after step 2 at {_s(end2)}, but {len(after):,} kernel launch calls "
        f"({100 * len(after) / len(calls):.0f}%) follow, to {_s(after[-1])}: NVTX recording stopped while "
        "the program went on"
    )
    start1, _ = _step(path, 1)
    resumes = min(t for t, _ in calls if t > end2)
    assert checks["GPU coverage"]["Evidence"].endswith(
        f"the CUDA trace has nothing from {_s(start1)} to {_s(resumes)}"
    )
    assert checks["GPU coverage"]["Status"] == WARN
    assert checks["GPU coverage"]["Evidence"].startswith(
        "no `measured` range (lost with the NVTX ranges) and no run's record: which steps were warm-up is "
        "not known, so every step is checked, warm-up ones too; 2 of 3 steps (steps 1, 2 of steps 0–2) "
        "recorded no launch call and no GPU work while step 0 launches "
    )


def test_nvtx_cut_warm_up_steps_told_by_the_runs_record(broken_h100: dict[str, Path]) -> None:
    """The same capture with the run's record (5 warm-up steps, 10 measured: `advise RUN`, `run --nsys`):
    steps 0–2 are warm-up, so GPU coverage checks no step of them and passes; NVTX steps still fails."""
    path = broken_h100["nvtx-cut"]
    with open_trace(path, cache=False) as trace:
        checks = {c.name: c for c in capture_health(trace, timed=10, warmup=5).checks}
    assert checks["GPU coverage"].status == OK
    assert "; no measured step among steps 0–2 (all warm-up)" in checks["GPU coverage"].evidence
    assert checks["NVTX steps"].status == FAIL
    assert checks["NVTX steps"].evidence.startswith("the step ranges stop after step 2 at ")
    with open_trace(path, cache=False) as trace:  # as `run --nsys` judges it, with its record
        stored = capture_advice(trace, record=RunRecord(steps=15, measured_steps=10))
    (row,) = [c for c in stored["health"]["checks"] if c["name"] == "GPU coverage"]
    assert row["status"] == OK and "no measured step among steps 0–2 (all warm-up)" in row["evidence"]


@pytest.mark.parametrize(("lost", "gap"), [((10, 14), ""), ((10, 12), "; steps 10–12 have no range")])
def test_nvtx_lost_inside_the_measured_range_fails(tmp_path: Path, lost: tuple[int, int], gap: str) -> None:
    """NVTX loses the ranges of whole measured steps (10–14: the rest of the run; 10–12: a stretch in the
    middle) while CUDA goes on, and the `measured` range around them survives: no step lacks a phase, and no
    launch call follows the harness's last range, but thousands lie in the measured range and in no step.
    It fails, as NVTX that stops does, and `advise` refuses to rank."""
    src = need(H100_DIR / "report.sqlite")
    first = H100_STEP_END.replace("e.end", "e.start").format(step=lost[0])
    last = H100_STEP_END.format(step=lost[1])
    path = derive(
        src,
        tmp_path / "nvtx-lost.sqlite",
        f"DELETE FROM NVTX_EVENTS WHERE start >= ({first}) AND end <= ({last})",
    )
    ranges = "SELECT e.start, e.end FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId WHERE s.value = "
    spans = query_rows(path, ranges + "'step'")
    ((m_start, m_end),) = query_rows(path, ranges + "'measured'")
    calls = [t for t, _ in _launches(path)]
    outside = [t for t in calls if m_start <= t < m_end and not any(s <= t < e for s, e in spans)]
    assert len(outside) == 2700 * (lost[1] - lost[0] + 1)  # a measured step of h100-medium launches 2,700
    code, checks = _checks(path)
    assert code == 1
    assert checks["NVTX steps"]["Status"] == FAIL
    assert checks["NVTX steps"]["Evidence"] == (
        f"{len(outside):,} kernel launch calls ({100 * len(outside) / len(calls):.0f}%) in the `measured` "
        f"range lie in no step range, from {_s(outside[0])} (after step {lost[0] - 1}) to "
        f"{_s(outside[-1])}{gap}: NVTX recording lost steps while the program went on; the harness's ranges "
        f"end at {_s(m_end)}"
    )
    advised = runner.invoke(app, ["advise", str(path)])
    assert advised.exit_code == 1 and "NVTX steps" in advised.output


def test_steps_lost_whole_with_their_cuda_work_fail(tmp_path: Path) -> None:
    """Steps 10–12 lost whole, their NVTX ranges with their CUDA calls, kernels and copies (a stretch the
    profiler recorded nothing of): no launch call is left to tell, and health said ok though its evidence
    listed steps 5–9, 13, 14. The harness numbers its steps one after another, so the gap fails."""
    src = need(H100_DIR / "report.sqlite")
    first = H100_STEP_END.replace("e.end", "e.start").format(step=10)
    last = H100_STEP_END.format(step=12)
    cuda = ("RUNTIME", "KERNEL", "MEMCPY")  # h100-medium has no memset
    lo_hi = "(SELECT lo FROM span) AND (SELECT hi FROM span)"
    path = derive(
        src,
        tmp_path / "stretch-lost.sqlite",
        f"CREATE TEMP TABLE span AS SELECT ({first}) AS lo, ({last}) AS hi",
        "DELETE FROM NVTX_EVENTS WHERE start >= (SELECT lo FROM span) AND end <= (SELECT hi FROM span)",
        *(f"DELETE FROM CUPTI_ACTIVITY_KIND_{t} WHERE start BETWEEN {lo_hi}" for t in cuda),
    )
    ((m_end,),) = query_rows(
        path, "SELECT e.end FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId WHERE s.value = 'measured'"
    )
    code, checks = _checks(path)
    assert code == 1
    assert checks["NVTX steps"]["Status"] == FAIL
    assert checks["NVTX steps"]["Evidence"] == (
        "steps 10–12 have no range among the measured steps (steps 5, 6, 7, 8, 9, 13, 14): NVTX recording "
        f"lost them; the harness's ranges end at {_s(m_end)}"
    )


def test_kernels_named_unknown_warn_with_their_share(broken_h100: dict[str, Path]) -> None:
    """nsys names kernels it cannot resolve `[Unknown]`: h100-medium as recorded (72%) and with every kernel
    renamed (100%)."""
    for path in (H100_DIR / "report.sqlite", broken_h100["unknown"]):
        path = shared_export("h100-medium") if path.parent == H100_DIR else path
        n, ns = query_rows(
            path,
            "SELECT count(*), sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName WHERE s.value = '[Unknown]'",
        )[0]
        total, all_ns = query_rows(path, "SELECT count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[
            0
        ]
        code, checks = _checks(path)
        check = checks["kernel names"]
        assert code == 0 and check["Status"] == WARN
        assert check["Evidence"] == (
            f"{n:,} of {total:,} kernels named `[Unknown]`: {ns / 1e6:,.3f} ms, {100 * ns / all_ns:.1f}% of "
            "the kernels' GPU time"
        )
        assert "nsys 2023.4.4.54 could not resolve" in check["What to do"]
    assert n == total == 30528


def test_kineto_gpu_events_dropped_after_a_step_fail(tmp_path: Path) -> None:
    """A Kineto trace whose GPU events stop after ProfilerStep#4 (CUPTI buffers lost, kineto #1545): steps
    5 and 6 launch kernels that are not there."""
    path = cut_after_step("nccl", 4, tmp_path / "cut.json")
    events = raw_events("nccl")
    modelled = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "cuda_runtime", "cuda_driver", "cpu_op")
    first = min(
        e["ts"] for e in events if e.get("cat") in (*modelled, "user_annotation", "gpu_user_annotation")
    )
    step5 = next(e for e in events if e.get("name") == "ProfilerStep#5" and e["cat"] == "user_annotation")
    launches5 = [
        e
        for e in events
        if e.get("cat") == "cuda_runtime"
        and LAUNCH.match(e["name"])
        and step5["ts"] <= e["ts"] < step5["ts"] + step5["dur"]
    ]
    with open_trace(path, cache=False) as trace:
        check = next(c for c in capture_health(trace).checks if c.name == "GPU coverage")
    assert check.status == FAIL
    start = (step5["ts"] - first) / 1e6
    assert check.evidence.startswith(
        f"2 of 3 steps (steps 5, 6 of steps 4–6) launch kernels that never ran: step 5 (from {start:,.3f} s) "
        "has "
        f"{len(launches5):,} of {len(launches5):,} launch calls without GPU work; the trace of kernels "
        "stops at"
    )
    assert runner.invoke(app, ["health", str(path), "--no-cache", "--strict"]).exit_code == 1


def test_kineto_cuda_dropped_after_a_step_fails(tmp_path: Path) -> None:
    """The CUDA trace as a whole (launch calls and GPU work) stops after ProfilerStep#4: the steps after it
    have nothing while the step before launched 900 kernels."""
    cats = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "ac2g")
    path = cut_after_step("nccl", 4, tmp_path / "quiet.json", cats)
    with open_trace(path, cache=False) as trace:
        check = next(c for c in capture_health(trace).checks if c.name == "GPU coverage")
    assert check.status == FAIL
    assert check.evidence.startswith(
        "2 of 3 steps (steps 5, 6 of steps 4–6) recorded no launch call and no GPU work while step 4 "
        "launches 900 kernels: the CUDA trace stops before "
    )


def test_graph_launches_without_kernels_do_not_fail(tmp_path: Path) -> None:
    """Where nsys traces CUDA graphs whole (--cuda-graph-trace=graph) a graph launch has no kernel events:
    nccl with steps 5 and 6 launching graphs only, none of them with GPU work, is not a trace that stopped."""
    events = raw_events("nccl")
    step4 = next(e for e in events if e.get("name") == "ProfilerStep#4" and e["cat"] == "user_annotation")
    end = step4["ts"] + step4["dur"]
    kept = []
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "ac2g") and e.get("ts", 0) > end:
            continue
        if e.get("cat") == "cuda_runtime" and e["ts"] > end and LAUNCH.match(e["name"]):
            e = {**e, "name": "cudaGraphLaunch"}
        kept.append(e)
    graphs = sum(1 for e in kept if e.get("name") == "cudaGraphLaunch")
    path = write_trace(tmp_path / "graphs.json", kept)
    with open_trace(path, cache=False) as trace:
        check = next(c for c in capture_health(trace).checks if c.name == "GPU coverage")
    assert check.status == OK
    assert f"; {graphs:,} graph launches, 0 with GPU work; 3 steps checked" in check.evidence


def test_launch_calls_recorded_twice_count_once(tmp_path: Path) -> None:
    """The A100 export records each of its 5 kernel launches twice under one correlationId
    (cudaLaunchKernel and cudaLaunchKernel_v7000): GPU coverage counts 5 calls, as `harness launch` and
    `harness api` do, and a kernel lost is 1 of 5 calls without GPU work, not 2 of 10."""
    src = shared_export("a100-saxpy-mpi")
    launch = (
        "FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "WHERE s.value LIKE 'cudaLaunchKernel%'"
    )
    ((rows, calls),) = query_rows(
        src, f"SELECT count(*), count(DISTINCT r.globalTid || ' ' || r.correlationId) {launch}"
    )
    assert (rows, calls) == (10, 5)
    _, checks = _checks(src)
    assert checks["GPU coverage"]["Evidence"] == "5 of 5 kernel launch calls ran"
    lost = derive(
        src,
        tmp_path / "one-lost.sqlite",
        "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL "
        "WHERE start = (SELECT max(start) FROM CUPTI_ACTIVITY_KIND_KERNEL)",
    )
    _, checks = _checks(lost)
    assert checks["GPU coverage"]["Status"] == FAIL
    assert checks["GPU coverage"]["Evidence"].startswith(
        "1 of 5 kernel launch calls (20.00%) have no GPU work"
    )


def test_steps_whose_launch_calls_were_lost_say_their_kernels_ran(tmp_path: Path) -> None:
    """The CUDA API calls of steps 10–12 lost while their kernels were recorded: the steps fail, and the
    evidence says their launch calls are missing while 8,100 kernels ran, not that they had no GPU work; the
    per-step table counts those kernels by their own start (2,700 a step, as every measured step launches)
    and still counts no kernel launched from them."""
    src = need(H100_DIR / "report.sqlite")
    first = H100_STEP_END.replace("e.end", "e.start").format(step=10)
    last = H100_STEP_END.format(step=12)
    path = derive(
        src,
        tmp_path / "calls-lost.sqlite",
        f"DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start >= ({first}) AND start <= ({last})",
    )
    (lo, _), (_, hi) = _step(path, 10), _step(path, 12)
    ((ran,),) = query_rows(
        path, f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start >= {lo} AND start < {hi}"
    )
    resumes = next(t for t, _ in _launches(path) if t > hi)
    code, checks = _checks(path)
    assert code == 1
    check = checks["GPU coverage"]
    assert check["Status"] == FAIL
    assert check["Evidence"] == (
        f"3 of 10 measured steps (steps 10–12 of steps 5–14) recorded no launch call while {ran:,} kernels "
        f"ran in them: their launch calls are missing (the CUDA API trace has no launch call from {_s(lo)} "
        f"to {_s(resumes)})"
    )
    assert ran == 8100
    assert "lost the CUDA calls that launched this GPU work" in check["What to do"]
    with open_trace(path, cache=False) as trace:
        table = capture_health(trace).details["GPU coverage by step"].set_index("Step")
    assert table.loc[[10, 11, 12], "Kernels without launch call"].tolist() == [2700, 2700, 2700]
    assert table.loc[[10, 11, 12], ["Launch calls", "Kernels"]].to_numpy().tolist() == [[0, 0]] * 3
    assert table.loc[[9, 13], "Kernels without launch call"].tolist() == [0, 0]


def test_nvtx_stopped_part_way_counts_the_measured_steps(tmp_path: Path) -> None:
    """NVTX stops after step 9's forward range (10 measured steps, 5–14): the ranges of steps 5–9 remain and
    the `measured` range around all ten. The check said `1 of 5 measured steps`, as if five were measured;
    counted against the run's timers (10) it is 6 of 10, and without them it says 5 were recorded and names
    the 13,500 launch calls of the measured steps that have no range."""
    src = need(H100_DIR / "report.sqlite")
    forward = "SELECT e.end FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
    forward += "WHERE s.value = 'forward' AND e.int64Value = 9"
    path = derive(src, tmp_path / "nvtx-stops.sqlite", f"DELETE FROM NVTX_EVENTS WHERE start > ({forward})")
    ((m_start, m_end),) = query_rows(
        path,
        "SELECT e.start, e.end FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
        "WHERE s.value = 'measured'",
    )
    _, step9_end = _step(path, 9)
    calls = [t for t, _ in _launches(path)]
    outside = [t for t in calls if step9_end <= t < m_end]
    assert len(outside) == 13500  # steps 10–14, 2,700 launch calls each
    code, checks = _checks(path)
    assert code == 1
    check = checks["NVTX steps"]
    assert check["Status"] == FAIL
    assert check["Evidence"] == (
        "1 of the 5 measured steps recorded lacks NVTX ranges: step 9 has no backward, optimizer; 13,500 "
        f"kernel launch calls ({100 * len(outside) / len(calls):.0f}%) in the `measured` range lie in no "
        f"step range, from {_s(outside[0])} (after step 9) to {_s(outside[-1])}: NVTX recording lost steps "
        f"while the program went on; the harness's ranges end at {_s(m_end)}"
    )
    with open_trace(path, cache=False) as trace:
        timed = next(c for c in capture_health(trace, timed=10).checks if c.name == "NVTX steps")
    assert timed.status == FAIL
    assert timed.evidence == (
        "6 of 10 measured steps (by the run's timers) lack NVTX ranges: 5 have none; step 9 has no backward, "
        f"optimizer; the harness's ranges end at {_s(m_end)}"
    )
    assert m_start < _step(path, 5)[0]
