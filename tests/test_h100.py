"""The project's own headline command on an H100 (`harness run medium --nsys`, nsys 2023.4, CUDA 13.0):
../shared/fixtures/nsys/h100-medium. Its tables against both `nsys stats` oracles are in test_parity and
test_stats_format; here what the run itself claims: the phases add up with nothing unattributed (kernels
of autograd's thread credited to backward), and the NVTX ranges agree with the run's own timers."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import H100_DIR
from typer.testing import CliRunner

from analysis.compare.agreement import agreement_table, pair_ranges
from analysis.front.reading import read_tables
from analysis.tables.nvtx import nvtx_ranges
from analysis.tables.nvtx_gpu import nvtx_gpu_summary, phase_check
from analysis.trace.opening import open_trace
from harness.cli import app

PHASES = ("forward", "backward", "optimizer")
runner = CliRunner()


def run_json() -> dict:  # type: ignore[type-arg]
    return json.loads((H100_DIR / "run.json").read_text())


def test_phases_add_up_with_nothing_unattributed(h100_export: Path) -> None:
    trace = open_trace(h100_export)
    check = phase_check(trace, PHASES).set_index("Phase")
    assert check.loc[list(PHASES), "Kernels"].tolist() == [9_020, 16_300, 1_680]
    assert check.loc[list(PHASES), "Total Time (ns)"].tolist() == [124_739_689, 243_427_349, 124_004_247]
    assert (check.loc["unattributed", "Kernels"], check.loc["unattributed", "Total Time (ns)"]) == (0, 0)
    per_range = nvtx_gpu_summary(trace, mode="phase", phases=PHASES).set_index("Range")
    assert per_range.loc["backward", "Kern Inst"] == 16_300 and per_range.loc["backward", "NVTX Inst"] == 10


def test_phase_mode_from_the_command(h100_export: Path) -> None:
    result = runner.invoke(app, ["nvtx-gpu", str(h100_export), "--mode", "phase", "--format", "csv"])
    assert result.exit_code == 0, result.output
    check = pd.read_csv(io.StringIO(result.stdout.split("\n\n")[1].split("\n", 1)[1]))
    assert check.set_index("Phase").loc["all kernels", "Kernels"] == 27_000


def test_nvtx_agrees_with_the_runs_timers(h100_export: Path) -> None:
    """The run's timers (run.json, from the same process) against the export's ranges: within 0.2 %, and
    the same figures the run printed (forward 0.051 %, backward 0.023 %, optimizer 0.113 %)."""
    record = run_json()
    timers = pd.DataFrame(
        [(s["step"], p, s[f"{p} (ns)"], s["warmup"]) for s in record["steps"] for p in PHASES],
        columns=["step", "phase", "duration_ns", "warmup"],
    )
    ranges = nvtx_ranges(open_trace(h100_export), names=["step", *PHASES])
    table = agreement_table(pair_ranges(timers, ranges, PHASES), PHASES).set_index("phase")
    printed = {row["phase"]: row for row in record["NVTX vs timers"]}
    percent = table["rel_diff"] * 100
    for phase in PHASES:
        assert table.loc[phase, "steps"] == 10
        assert abs(percent[phase]) < 0.2
        assert percent[phase] == pytest.approx(printed[phase]["difference (%)"], abs=1e-9)
    assert [round(percent[p], 3) for p in PHASES] == [0.051, 0.023, 0.113]


@pytest.mark.parametrize("args", [["nvtx-gpu"], ["summary", "--top", "2"]], ids=["nvtx-gpu", "summary"])
def test_the_phase_check_draws_as_a_table(h100_export: Path, cache_dir: Path, args: list[str]) -> None:
    """ "Do the phases add up?" on the terminal, computed and then served from the cache: every row drawn."""
    for _ in range(2):
        result = runner.invoke(app, [args[0], str(h100_export), *args[1:], "--wide"])
        assert result.exit_code == 0, result.output
        check = result.stdout.split("Do the phases add up?")[1]
        assert [p for p in ("optimizer", "unattributed", "all kernels") if p in check] == [
            "optimizer",
            "unattributed",
            "all kernels",
        ]


@pytest.mark.parametrize("command", ["advise", "health"])
def test_advise_and_health_run_on_it(h100_export: Path, command: str) -> None:
    result = runner.invoke(app, [command, str(h100_export)])
    assert result.exit_code in (0, 1), result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_top_leaves_the_phase_check_whole(h100_export: Path, cache_dir: Path) -> None:
    """`harness summary --top 2` cut "Do the phases add up?" to forward and backward: no optimizer, no
    unattributed, no all-kernels row, so the question had no answer. --top cuts the ranked tables only;
    served again from the cache, the same."""
    for _ in range(2):  # computed, then served from the cache entry
        result = read_tables("summary", [h100_export], {"stats_format": "2023.4"}, top=2)
        tables = dict(result.tables)
        check = tables["Do the phases add up?"]
        check = check if hasattr(check, "iloc") else check.frame()
        assert check["Phase"].tolist() == ["forward", "backward", "optimizer", "unattributed", "all kernels"]
        assert check["Kernels"].tolist() == [9020, 16300, 1680, 0, 27000]
        assert len(tables["CUDA kernels (cuda_gpu_kern_sum)"]) == 2
