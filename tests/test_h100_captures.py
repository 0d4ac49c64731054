"""Real captures of a CUDA 13 program on an H100 by nsys 2023.4 with its own CUPTI 12.4 and with CUPTI 13.0
added (tests/data/h100/README.md): the doctor's self-test fails the first where it lost the work, passes the
last; capture health fails the broken tiny run and passes the whole one."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.advice import launches
from analysis.advice.health import capture_health
from analysis.trace.opening import open_trace
from harness.experiments.selftest import judged

DATA = Path(__file__).parent / "data" / "h100"


@pytest.fixture(scope="module")
def exports(h100_captures: dict[str, Path]) -> dict[str, Path]:
    return h100_captures


def verdicts(export: Path) -> dict[str, tuple[str, str]]:
    return {item.removeprefix("GPU self-test: "): (status, detail) for item, status, detail in judged(export)}


def test_the_self_test_fails_what_cupti_12_4_lost_of_a_cuda_13_program(exports: dict[str, Path]) -> None:
    seen = verdicts(exports["selftest-cupti12.4"])
    assert seen["a kernel"][0] == "ok"
    assert seen["a cuBLAS matrix product"] == (
        "fail",
        "lost: no cudaLaunch/cuLaunch call inside 'doctor:cublas' (the CUDA API trace lost it)",
    )
    assert seen["a CUDA graph replay"] == (
        "fail",
        "lost: no cudaGraphLaunch/cuGraphLaunch call inside 'doctor:graph' (the CUDA API trace lost it)",
    )


def test_with_cupti_13_a_graph_traced_whole_is_still_lost(exports: dict[str, Path]) -> None:
    seen = verdicts(exports["selftest-cupti13-graph"])
    assert [status for status, _ in seen.values()] == ["ok", "ok", "fail"]
    assert seen["a cuBLAS matrix product"][1].startswith(
        "2 kernel(s), e.g. sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8"
    )
    assert seen["a CUDA graph replay"][1] == (
        "lost: 1 cudaGraphLaunch/cuGraphLaunch call(s) inside 'doctor:graph', no kernel recorded"
    )


def test_with_cupti_13_and_graphs_per_node_the_self_test_passes(exports: dict[str, Path]) -> None:
    seen = verdicts(exports["selftest-cupti13-node"])
    assert [status for status, _ in seen.values()] == ["ok", "ok", "ok"]
    assert seen["a CUDA graph replay"][1].startswith(
        "2 kernel(s), e.g. void at::native::vectorized_elementwise_kernel<(int)4"
    )


def checks_of(export: Path) -> dict[str, tuple[str, str]]:
    with open_trace(export, cache=False) as trace:
        return {c.name: (c.status, c.evidence) for c in capture_health(trace).checks}


def test_health_fails_the_tiny_run_whose_cuda_trace_stopped(exports: dict[str, Path]) -> None:
    checks = checks_of(exports["tiny-cupti12.4"])
    status, evidence = checks["GPU coverage"]
    assert status == "fail"
    assert evidence.startswith(
        "1 of 3 measured steps (step 1 of steps 1–3) launches kernels that never ran: step 1 (from 11.846 s) "
        "has 1 of 1 launch calls without GPU work; the trace of kernels stops at 11.462 s (step 0)"
    )
    assert evidence.endswith(
        "; 2 of 3 measured steps (steps 2, 3 of steps 1–3) recorded no launch call and no GPU work while "
        "step 0 launches 11 kernels: the CUDA trace stops before 11.870 s"
    )
    assert checks["CUDA kernels"] == ("ok", "13 kernels from 1,041 CUDA API calls")


def test_health_passes_the_whole_tiny_run(exports: dict[str, Path]) -> None:
    checks = checks_of(exports["tiny-cupti13"])
    assert checks["GPU coverage"] == (
        "ok",
        "3,444 of 3,444 kernel launch calls ran; 5 steps checked, 484 launch calls each",
    )
    assert checks["kernel names"] == ("ok", "all 3,444 kernels named")
    assert all(status != "fail" for status, _ in checks.values())


def test_health_passes_the_self_test_whose_graph_was_captured(exports: dict[str, Path]) -> None:
    """The two launches made while torch.cuda.graph captured a stream run only in the graph's replay: on an
    H200 (2026-11-28) the self-test program's health failed GPU coverage on them: 2 of 15 "without GPU
    work"."""
    checks = checks_of(exports["selftest-cupti13-node"])
    assert checks["GPU coverage"] == (
        "ok",
        "13 of 13 kernel launch calls ran; 1 graph launches, 1 with GPU work",
    )
    assert all(status != "fail" for status, _ in checks.values())


def test_launches_without_work_but_no_stop_are_said_so(
    exports: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without knowing of stream capture, the same capture has launch calls without GPU work before calls
    with it: the evidence says they are not where a trace stopped (it said "the 0 launch calls after it")."""
    monkeypatch.setattr(launches, "CAPTURE_BEGINS", frozenset())
    checks = checks_of(exports["selftest-cupti13-node"])
    assert checks["GPU coverage"] == (
        "fail",
        "2 of 15 kernel launch calls (13.33%) have no GPU work; they are not where a trace stopped: launch "
        "calls have GPU work to the last, at 4.877 s",
    )
