"""`harness diff` under attack (issue 22): a gate of nan or inf, a gate against a run with no measured
steps, a side that is a missing file, the same export on both sides."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_diff import CPU_TRAIN, make_run
from typer.testing import CliRunner

from harness.cli import app
from harness.core.records import RunConfig, RunResult
from harness.store.results import ResultsStore

pytestmark = pytest.mark.attack
runner = CliRunner()


@pytest.fixture
def pair(tmp_db: str) -> tuple[str, str]:
    store = ResultsStore(tmp_db)
    store.save(make_run("base-1", noise=0.01, seed=1))
    store.save(make_run("same-1", noise=0.01, seed=2))
    return "base-1", "same-1"


@pytest.mark.parametrize("gate", ["nan", "inf", "-inf", "NaN"])
def test_a_gate_that_is_not_a_number_is_refused(pair: tuple[str, str], gate: str) -> None:
    r = runner.invoke(app, ["diff", *pair, "--gate", gate])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "is not a percentage" in r.output or "not in the range" in r.output


@pytest.mark.parametrize("status", ["oom", "error"])
def test_a_gate_against_a_run_without_measured_steps_fails(tmp_db: str, status: str) -> None:
    store = ResultsStore(tmp_db)
    store.save(make_run("base-1", noise=0.01, seed=1))
    failed = RunResult(
        run_id="failed-1", config=RunConfig(model="tiny"), status=status, device="cpu", error="out of memory"
    )
    store.save(failed)
    for args in (["base-1", "failed-1"], ["failed-1", "base-1"]):
        r = runner.invoke(app, ["diff", *args, "--gate", "5"])
        assert r.exit_code == 1 and "Traceback" not in r.output, r.output
        assert "failed-1 has no measured steps" in r.stderr and f"status {status}" in r.stderr


def test_a_gate_between_two_good_runs_still_passes(pair: tuple[str, str]) -> None:
    assert runner.invoke(app, ["diff", *pair, "--gate", "50"]).exit_code == 0


@pytest.mark.parametrize("missing", ["/nonexistent", "gone/report.sqlite", "trace.json.gz"])
def test_a_missing_file_is_no_such_file(tmp_db: str, missing: str) -> None:
    r = runner.invoke(app, ["diff", str(CPU_TRAIN), missing])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"no such file: {missing}" in r.stderr and "no run with id" not in r.stderr


def test_the_same_export_twice_prints_each_note_once(tmp_path: Path) -> None:
    from kineto_data import write_trace
    from test_kineto_faults import KERNEL

    trace = write_trace(tmp_path / "t.json", [KERNEL, {**KERNEL, "ts": "soon"}])
    r = runner.invoke(app, ["diff", str(trace), str(trace), "--wide"])
    assert r.exit_code == 0, r.output
    assert r.output.count("left out 1 Kineto events") == 1, r.output
