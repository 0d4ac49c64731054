"""Capture health of damaged Kineto traces: each made from a real fixture with some events written twice or
given times no GPU ran, judged as an nsys export with the same fault is, and its verdict carried into the
tables read from it afterwards."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from kineto_data import raw_events, trace_path, write_trace
from reading import flat
from typer.testing import CliRunner

from harness.cli import app

pytestmark = pytest.mark.usefixtures("cache_dir")
runner = CliRunner()
YEARS_126_US = 126 * 365 * 86_400 * 10**6
ALEXNET_FIRST_KERNEL = (
    "'void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
)


def _kernels(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("cat") == "kernel"]


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, flat(result.stderr)


def _checks(path: Path) -> pd.DataFrame:
    code, out, _ = _run("health", str(path), "-f", "csv")
    assert code == 0
    return pd.read_csv(io.StringIO(out), keep_default_na=False).set_index("Check")


def _warning(path: Path) -> str:
    return (
        f"warning: {path} failed its health checks (GPU work recorded once): the numbers read from it may be "
        f"wrong; `harness health {path}` says why"
    )


def test_kineto_kernels_written_twice_fail_health_and_the_tables_read_after_say_so(tmp_path: Path) -> None:
    """alexnet with each of its 79 kernel events written twice: health failed, but `nvtx-gpu` and `kernels`
    then printed the doubled sums without a word, where an nsys export's tables warn."""
    events = raw_events("alexnet")
    path = write_trace(tmp_path / "twice.json", events + [dict(e) for e in _kernels(events)])
    code, table, said = _run("kernels", str(path), "-f", "csv")
    assert code == 0 and "failed its health checks" not in said  # not judged yet
    assert pd.read_csv(io.StringIO(table))["Instances"].sum() == 158  # every event, as HTA counts them
    check = _checks(path).loc["GPU work recorded once"]
    assert check["Status"] == "fail"
    assert check["Evidence"].startswith(
        "79 rows repeat another exactly (79 kernel): the kernel tables count them twice, as HTA does, the "
        f"breakdown's busy and idle times once; the first, kernel {ALEXNET_FIRST_KERNEL}"
    )
    assert check["What to do"] == "a damaged trace (events written twice): record it again"
    assert _run("health", str(path), "--strict")[0] == 1
    for command in ("nvtx-gpu", "kernels"):
        code, table, said = _run(command, str(path), "-f", "csv")
        assert code == 0 and said.count("failed its health checks") == 1 and _warning(path) in said
    assert pd.read_csv(io.StringIO(table))["Instances"].sum() == 158  # the table stands, warned of
    code, _, said = _run("kernels", str(path), "-f", "csv", "--no-cache")
    assert code == 0 and "failed its health checks" not in said  # nothing kept is read


def test_a_sound_kineto_trace_is_read_without_a_warning_after_health(tmp_path: Path) -> None:
    path = tmp_path / "alexnet.json.gz"
    shutil.copy(trace_path("alexnet"), path)
    assert _run("health", str(path), "--strict")[0] == 0  # profiler steps warn only
    code, _, said = _run("nvtx-gpu", str(path), "-f", "csv")
    assert code == 0 and "failed its health checks" not in said


def test_a_kineto_kernel_lasting_126_years_fails_health_naming_it(tmp_path: Path) -> None:
    """nccl with one kernel's dur set to 126 years of µs: it stays below 2**62 ns, so the reader keeps it,
    and every check passed while the kernel tables summed 126 years."""
    events = raw_events("nccl")
    kernel = _kernels(events)[5]
    kernel["dur"] = YEARS_126_US
    path = write_trace(tmp_path / "long.json", events)
    check = _checks(path).loc["GPU work in the trace's span"]
    assert check["Status"] == "fail"
    assert check["Evidence"] == (
        "1 GPU event lies far outside the host's events (0.683 s from the first CUDA call or operator to "
        "the last one's end); the farthest, kernel 'void cudnn::ops::nchwToNhwcKernel<float, float, float, "
        "false, true, (cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_par…', starts at 0.567 s and lasts "
        "3,973,536,000.000 s (126.0 years)"
    )
    assert _run("health", str(path), "--strict")[0] == 1
    code, _, said = _run("kernels", str(path), "-f", "csv")
    assert code == 0 and "failed its health checks (GPU work in the trace's span)" in said


def test_a_kineto_kernel_a_day_after_the_trace_fails_health_naming_it(tmp_path: Path) -> None:
    events = raw_events("alexnet")
    kernel = _kernels(events)[0]
    kernel["ts"] += 86_400 * 10**6
    path = write_trace(tmp_path / "late.json", events)
    check = _checks(path).loc["GPU work in the trace's span"]
    assert check["Status"] == "fail"
    assert check["Evidence"].startswith(
        "1 GPU event lies far outside the host's events (43.424 s from the first CUDA call or operator to "
        f"the last one's end); the farthest, kernel {ALEXNET_FIRST_KERNEL}"
    )
    assert check["Evidence"].endswith("starts at 86,430.508 s and lasts 0.000 s")


def test_a_kineto_kernel_past_2_62_ns_is_named_as_well_as_left_out(tmp_path: Path) -> None:
    """alexnet's times are Unix µs: 126 years more puts the kernel's end past 2**62 ns, so the reader leaves
    it out (`invalid events` fails, naming no kernel); the span check names it."""
    events = raw_events("alexnet")
    _kernels(events)[0]["dur"] = YEARS_126_US
    checks = _checks(write_trace(tmp_path / "past.json", events))
    assert checks.loc["invalid events", "Status"] == "fail"
    assert checks.loc["GPU work in the trace's span", "Status"] == "fail"
    evidence = checks.loc["GPU work in the trace's span", "Evidence"]
    assert f"the farthest, kernel {ALEXNET_FIRST_KERNEL}" in evidence
    assert evidence.endswith("starts at 30.508 s and lasts 3,973,536,000.000 s (126.0 years)")


@pytest.mark.parametrize("fixture", ["alexnet", "diff-test"])
def test_the_shared_traces_lie_in_their_span(fixture: str) -> None:
    check = _checks(trace_path(fixture)).loc["GPU work in the trace's span"]
    assert check["Status"] == "ok"
    assert check["Evidence"].startswith("every kernel, copy, set and sync within or near the host's events")
