"""Events far outside the span of the host's events, in captures that keep no span of their own: Kineto traces
with a CUDA call, an operator or a range given times the program never ran, and an nsys 2020.3 export (no
ANALYSIS_DETAILS, so no capture end) with a kernel or a CUDA call lasting 126 years."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import shared_export
from export_data import derive, query_rows
from kineto_data import raw_events, trace_path, write_trace
from typer.testing import CliRunner

from harness.cli import app

pytestmark = pytest.mark.usefixtures("cache_dir")
runner = CliRunner()
YEARS_126_US = 126 * 365 * 86_400 * 10**6
YEARS_10_US = 10 * 365 * 86_400 * 10**6
HOST = "host events in the trace's span"
GPU = "GPU work in the trace's span"
NCHW_KERNEL = (
    "kernel 'void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>"
    "(cudnn::ops::nchw2nhwc_par…'"
)


def _of(events: list[dict[str, Any]], cat: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("cat") == cat]


def _checks(path: Path) -> pd.DataFrame:
    result = runner.invoke(app, ["health", str(path), "-f", "csv", "--no-cache"])
    assert result.exit_code == 0 and "Traceback" not in result.output
    strict = runner.invoke(app, ["health", str(path), "--strict", "--no-cache"])
    assert strict.exit_code == (1 if "fail" in result.stdout else 0)
    return pd.read_csv(io.StringIO(result.stdout), keep_default_na=False).set_index("Check")


def test_a_kineto_cuda_call_lasting_126_years_fails_and_stretches_no_kernel_span(tmp_path: Path) -> None:
    """nccl with a cudaLaunchKernel lasting 126 years and a kernel lasting 10: every check passed, the call
    having stretched the host's span the kernel was held to past the kernel's end."""
    events = raw_events("nccl")
    call = _of(events, "cuda_runtime")[3]
    assert call["name"] == "cudaLaunchKernel"
    call["dur"] = YEARS_126_US
    _of(events, "kernel")[5]["dur"] = YEARS_10_US
    checks = _checks(write_trace(tmp_path / "long-call.json", events))
    assert checks.loc[HOST, "Status"] == "fail"
    assert checks.loc[HOST, "Evidence"] == (
        "1 host event lies far outside the others (0.684 s from the host's first start to its last); the "
        "farthest, CUDA call 'cudaLaunchKernel', starts at 0.567 s and lasts 3,973,536,000.000 s "
        "(126.0 years)"
    )
    assert checks.loc[HOST, "What to do"].startswith("a damaged or edited trace: no such call")
    assert checks.loc[GPU, "Status"] == "fail"
    assert checks.loc[GPU, "Evidence"] == (
        "1 GPU event lies far outside the host's events (0.683 s from the first CUDA call or operator to "
        f"the last one's end); the farthest, {NCHW_KERNEL}, starts at 0.567 s and lasts "
        "315,360,000.000 s (10.0 years)"
    )


def test_a_kineto_operator_a_day_after_the_rest_fails_naming_it(tmp_path: Path) -> None:
    """alexnet with its last operator moved a day later: the host's span the kernels are held to stays
    the trace's 43.424 s."""
    events = raw_events("alexnet")
    op = _of(events, "cpu_op")[-1]
    op["ts"] += 86_400 * 10**6
    checks = _checks(write_trace(tmp_path / "late-op.json", events))
    assert checks.loc[HOST, "Status"] == "fail"
    assert checks.loc[HOST, "Evidence"].startswith(
        f"1 host event lies far outside the others (43.425 s from the host's first start to its last); the "
        f"farthest, operator '{op['name']}', starts at 86,4"
    )
    assert checks.loc[GPU, "Status"] == "ok"
    assert "(43.424 s from the first CUDA call or operator" in checks.loc[GPU, "Evidence"]


def test_a_kineto_profiler_step_lasting_126_years_fails_naming_it(tmp_path: Path) -> None:
    events = raw_events("nccl")
    step = next(e for e in _of(events, "user_annotation") if e["name"] == "ProfilerStep#5")
    step["dur"] = YEARS_126_US
    evidence = _checks(write_trace(tmp_path / "long-step.json", events)).loc[HOST, "Evidence"]
    assert "; the farthest, range 'ProfilerStep#5', starts at " in evidence
    assert evidence.endswith(" and lasts 3,973,536,000.000 s (126.0 years)")


@pytest.mark.parametrize("fixture", ["alexnet", "nccl", "diff-control", "diff-test"])
def test_the_host_events_of_the_shared_traces_lie_in_their_span(fixture: str) -> None:
    check = _checks(trace_path(fixture)).loc[HOST]
    assert check["Status"] == "ok"
    assert check["Evidence"].startswith("every CUDA call, operator and range within or near the others")


def test_an_nsys_2020_3_kernel_lasting_126_years_fails(tmp_path: Path) -> None:
    """beast1 (nsys 2020.3: no ANALYSIS_DETAILS, so no capture end to hold events to) with its 101st kernel
    ending 126 years after it starts: every check passed."""
    src = shared_export("ext/beast1")
    assert not query_rows(src, "SELECT name FROM sqlite_master WHERE name = 'ANALYSIS_DETAILS'")
    kernel = "(SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1 OFFSET 100)"
    path = derive(
        src,
        tmp_path / "long-kernel.sqlite",
        f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + {YEARS_126_US * 1000} WHERE rowid = {kernel}",
    )
    (start,) = query_rows(path, f"SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = {kernel}")[0]
    (first,) = query_rows(path, "SELECT min(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0]
    checks = _checks(path)
    assert checks.loc[HOST, "Status"] == "ok"
    assert checks.loc[GPU, "Status"] == "fail"
    evidence = checks.loc[GPU, "Evidence"]
    assert evidence.startswith("1 GPU event lies far outside the host's events (0.876 s from the first CUDA")
    assert evidence.endswith(
        f"starts at {(start - first) / 1e9:,.3f} s and lasts 3,973,536,000.000 s (126.0 years)"
    )
    assert checks.loc[GPU, "What to do"].startswith("a damaged or edited export: no GPU ran then")


def test_an_nsys_2020_3_cuda_call_lasting_126_years_fails(tmp_path: Path) -> None:
    path = derive(
        shared_export("ext/beast1"),
        tmp_path / "long-call.sqlite",
        f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = start + {YEARS_126_US * 1000} WHERE rowid = 50",
    )
    checks = _checks(path)
    assert checks.loc[HOST, "Status"] == "fail"
    assert checks.loc[HOST, "Evidence"].startswith("1 host event lies far outside the others")
    assert "the farthest, CUDA call 'cuLaunchKernel', starts at " in checks.loc[HOST, "Evidence"]
    assert checks.loc[GPU, "Status"] == "ok"  # the span kernels are held to leaves the call out


@pytest.mark.parametrize("export", ["ext/fuser_report1", "a100-saxpy-mpi"])
def test_exports_with_a_capture_end_are_held_to_it_alone(export: str) -> None:
    checks = _checks(shared_export(export))
    assert HOST not in checks.index and GPU not in checks.index
    assert "none ends after the capture's end" in checks.loc["times", "Evidence"]
