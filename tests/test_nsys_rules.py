"""`harness advise --rule`: the rows of nsys analyze's six CUDA rules, equal to what Nsight Systems 2022.4
printed for every shared export (expected/analyze/RULE.csv; no file: nsys skipped the rule)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import NSYS_EXPORTS, SHARED_NSYS, need
from typer.testing import CliRunner

from analysis.advice.nsys_rules import RULES, Skipped, gpu_gaps, parse_rule, run_rule
from analysis.errors import AnalysisError
from analysis.trace import open_trace
from harness.cli import app

EXPORTS = [n for n in NSYS_EXPORTS if n != "cpu-train"]  # the GPU exports
CASES = [*((r, r) for r in RULES), ("gpu-starv_gap1", "gpu-starv:gap=1")]
runner = CliRunner()


def _export(name: str) -> Path:
    path = SHARED_NSYS / name / "report.sqlite"
    need(path)
    return path


@pytest.mark.parametrize("export", EXPORTS)
@pytest.mark.parametrize(("oracle", "spec"), CASES, ids=[c[0] for c in CASES])
def test_rule_csv_equals_nsys_analyze(export: str, oracle: str, spec: str) -> None:
    """The same bytes as `nsys analyze -r SPEC -f csv`: headers, rows, order, rounding; nothing for a rule
    that found nothing; a one-line note, no rows, for a rule nsys skipped."""
    expected = SHARED_NSYS / export / "expected" / "analyze" / f"{oracle}.csv"
    result = runner.invoke(app, ["advise", str(_export(export)), "--rule", spec, "--format", "csv"])
    assert result.exit_code == 0, result.output
    if not expected.exists():
        assert result.stdout == ""
        assert "skipped" in result.stderr and "(nsys skips it too)" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        return
    assert result.stdout == expected.read_text()


def test_the_oracles_hold_rows() -> None:
    """The parametrized test above compares something: 18 of the 44 oracle files have rows, 50 at most."""
    files = sorted(SHARED_NSYS.glob("**/expected/analyze/*.csv"))
    need(SHARED_NSYS)
    with_rows = [f for f in files if f.read_text().strip()]
    assert (len(files), len(with_rows)) == (44, 18)
    assert max(len(f.read_text().splitlines()) - 1 for f in with_rows) == 50


def test_rows_option_and_nsys_syntax() -> None:
    with open_trace(_export("ext/llama3_realsim")) as trace:
        assert len(run_rule(trace, "cuda-sync-api")) == 50  # the default limit, as in the oracle
        assert len(run_rule(trace, "cuda-sync-api:rows=5")) == 5
        everything = run_rule(trace, "cuda-sync-api:rows=-1")
        assert len(everything) > 50
        assert everything["Duration (ns)"].is_monotonic_decreasing
        # gap=1 over the same GPU work: the 50 longest of every gap above 1 ms
        gaps = gpu_gaps(trace, gap_ms=1, rows=-1)
        assert len(gaps) > 50 and (gaps["Duration (ns)"] > 1_000_000).all()
        assert run_rule(trace, "gpu-starv:gap=1").equals(gaps.head(50))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gpu-stav", "unknown rule 'gpu-stav'"),
        ("gpu-starv:gapp=3", "rule gpu-starv has no option 'gapp'"),
        ("gpu-low-util:chunks=x", "option chunks takes an integer, not 'x'"),
    ],
)
def test_bad_rule_specs(spec: str, message: str) -> None:
    with pytest.raises(AnalysisError, match=message):
        parse_rule(spec)
    result = runner.invoke(app, ["advise", str(_export("ext/beast1")), "--rule", spec])
    assert result.exit_code != 0
    assert message in result.stderr and "Traceback" not in result.output


def test_skipped_says_what_is_missing() -> None:
    with open_trace(_export("ext/weatherbench2")) as trace, pytest.raises(Skipped, match="has no memcpy"):
        run_rule(trace, "cuda-async-memcpy")


def test_kineto_trace_is_skipped_in_one_line() -> None:
    trace_path = (
        SHARED_NSYS.parent / "kineto" / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz"
    )
    need(trace_path)
    result = runner.invoke(app, ["advise", str(trace_path), "--rule", "gpu-starv", "--format", "csv"])
    assert result.exit_code == 0 and result.stdout == ""
    assert "nsys's rules read nsys exports" in result.stderr
