"""`harness run --nsys` and `harness overhead` end to end with the real nsys."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app

pytestmark = [pytest.mark.slow, pytest.mark.nsys]
PHASES = ("forward", "backward", "optimizer")
runner = CliRunner()


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_db: str, nsys_bin: str) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_NSYS", nsys_bin)
    return tmp_path


def test_run_nsys_end_to_end(in_tmp: Path) -> None:
    from analysis.export import open_export
    from analysis.nvtx import nvtx_ranges

    args = ["run", "tiny", "--device", "cpu", "--nsys", "--steps", "3", "--warmup", "1"]
    result = runner.invoke(app, [*args, "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    tables = json.loads(result.stdout)
    reps = list((in_tmp / "nsys_profiles").glob("*.nsys-rep"))
    sqlites = list((in_tmp / "nsys_profiles").glob("*.sqlite"))
    assert len(reps) == 1 and len(sqlites) == 1
    ranges = nvtx_ranges(open_export(sqlites[0]), names=["step", *PHASES])
    for phase in PHASES:
        per_step = ranges[ranges["name"] == phase]["payload"].astype(int).value_counts().sort_index()
        assert list(per_step.index) == [0, 1, 2, 3] and set(per_step) == {1}  # once per step, warmup included
    agreement = {row["Phase"]: row for row in tables["NVTX vs in-process timers"]}
    assert set(agreement) == set(PHASES)
    for row in agreement.values():
        assert row["Steps"] == 3
        assert abs(row["Difference (%)"]) < 10
    nvtx = {row["Range"]: row for row in tables["NVTX ranges (measured steps)"]}
    assert nvtx["forward"]["Instances"] == 3 and nvtx["step"]["Instances"] == 3
    # the run is stored with its profile and agreement
    # nsys's overhead against a baseline run without it, per phase and for whole steps
    overhead = tables["nsys overhead (one run each; `harness overhead` alternates repeats)"]
    assert [r["Phase"] for r in overhead] == [*PHASES, "step (sum)"]
    assert all(r["no nsys Avg (ns)"] > 0 and "nsys light overhead (%)" in r for r in overhead)
    for r in overhead:  # a verdict with its interval; a figure in the overhead column only when found
        assert r["nsys light CI low (%)"] <= r["nsys light CI high (%)"]
        found = r["nsys light verdict"].startswith("nsys light adds")
        assert found == (r["nsys light overhead (%)"] is not None), r
    listed = json.loads(runner.invoke(app, ["runs", "--format", "json"]).stdout)
    assert sorted(r["profiler"] for r in listed) == ["none", "nsys"]
    assert len({r["experiment"] for r in listed}) == 1  # the dashboard's overhead panel pairs them
    profiled = next(r for r in listed if r["profiler"] == "nsys")
    baseline = next(r for r in listed if r["profiler"] == "none")
    assert profiled["baseline_run_id"] == baseline["run_id"]  # the pair is linked in the database
    assert profiled["nsys_sqlite"] == str(sqlites[0].resolve())
    shown = json.loads(runner.invoke(app, ["show", profiled["run_id"], "--format", "json"]).stdout)
    assert {r["phase"] for r in shown["NVTX vs timers"]} == set(PHASES)
    assert f"baseline run {baseline['run_id']} (no profiler): phases" in shown
    pair = shown[f"overhead of {profiled['run_id']} against {baseline['run_id']} (one run each)"]
    assert [r["Phase"] for r in pair] == [*PHASES, "step (sum)"]
    info = {r["field"]: r["value"] for r in shown["run"]}
    assert info["machine"].startswith("load average ")  # recorded for the profiled run too
    base_info = {r["field"]: r["value"] for r in json.loads(
        runner.invoke(app, ["show", baseline["run_id"], "--format", "json"]).stdout
    )["run"]}  # fmt: skip
    assert base_info["profiled runs"] == profiled["run_id"]
    assert "other processes took" in base_info["machine"]


def test_run_nsys_table_output(in_tmp: Path) -> None:
    result = runner.invoke(app, ["run", "char", "--device", "cpu", "--nsys", "--steps", "2", "--warmup", "1"])
    assert result.exit_code == 0, result.output
    for title in ("NVTX ranges (measured steps)", "NVTX vs in-process timers", "report:", "export:"):
        assert title in result.output


def test_overhead_prints_a_row_per_phase(in_tmp: Path) -> None:
    args = ["overhead", "char", "--device", "cpu", "--repeats", "2", "--steps", "3", "--warmup", "1"]
    result = runner.invoke(app, [*args, "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["Phase"] for r in rows] == [*PHASES, "step (sum)"]
    assert all(r["no nsys Avg (ns)"] > 0 and r["nsys light Avg (ns)"] > 0 for r in rows)
    assert all("nsys light overhead (%)" in r and "nsys light verdict" in r for r in rows)
    for r in rows:
        verdict = r["nsys light verdict"]
        assert verdict.startswith(("nsys light adds", "inconclusive: the noise", "faster under")), verdict
        if r["nsys light overhead (%)"] is not None:  # a figure only with its interval above zero
            assert r["nsys light CI low (%)"] > 0
    listed = json.loads(runner.invoke(app, ["runs", "--format", "json"]).stdout)
    assert [r["profiler"] for r in listed] == ["none", "nsys", "none", "nsys"]  # alternated
    assert len({r["experiment"] for r in listed}) == 1
    # each profiled run is paired with the run without nsys made just before it
    assert [r["baseline_run_id"] for r in listed] == [None, listed[0]["run_id"], None, listed[2]["run_id"]]


def test_overhead_leaves_a_failed_round_out(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the 4th Python process (round 2's run under nsys) dies at start-up; the rounds around it count
    hook = in_tmp / "inject"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, pathlib\n"
        f"counter = pathlib.Path({str(in_tmp / 'count')!r})\n"
        "n = int(counter.read_text()) + 1 if counter.exists() else 1\n"
        "counter.write_text(str(n))\n"
        "if n == 4:\n    os._exit(3)\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]))
    args = ["overhead", "char", "--device", "cpu", "--repeats", "2", "--steps", "2", "--warmup", "1"]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "round 2 left out: nsys light run " in result.output and "worker exit code 3" in result.output
    assert "2 rounds × 2 steps = 4 steps each" in result.output
    listed = json.loads(runner.invoke(app, ["runs", "--format", "json"]).stdout)
    assert [r["status"] for r in listed] == ["ok", "ok", "ok", "error", "ok", "ok"]  # all kept in the store


def test_overhead_ci_target_stops_at_max_time(in_tmp: Path) -> None:
    args = ["overhead", "char", "--device", "cpu", "--steps", "2", "--warmup", "1", "--repeats", "1"]
    result = runner.invoke(app, [*args, "--ci-target", "0.001", "--max-time", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    # two rounds at least (the interval needs run-to-run drift), then --max-time stops it short of ±0.001%
    assert "stopped after 2 rounds" in result.output and "not yet under ±0.001%" in result.output
    assert "2 rounds × 2 steps = 4 steps each" in result.output
    assert "whole steps: " in result.output and "machine: load average" in result.output


def test_overhead_rejects_a_bad_ci_target(in_tmp: Path) -> None:
    result = runner.invoke(app, ["overhead", "char", "--device", "cpu", "--ci-target", "-1"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: --ci-target must be a positive percentage, got -1"


def test_failing_program_keeps_files_and_says_so(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the only Python process under nsys is the worker: make it die at start-up with exit code 3
    hook = in_tmp / "inject"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, sys\nsys.stderr.write('boom: injected failure\\n')\nsys.stderr.flush()\nos._exit(3)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(hook))
    result = runner.invoke(app, ["run", "char", "--device", "cpu", "--nsys", "--steps", "1", "--warmup", "0"])
    assert result.exit_code == 1
    assert "profiled program failed (exit code 3)" in result.output
    assert "boom: injected failure" in result.output
    assert "files kept:" in result.output
    assert list((in_tmp / "nsys_profiles").glob("*.nsys-rep"))  # partial report kept
    assert "Traceback" not in result.output


def test_measured_capture_leaves_warmup_out(in_tmp: Path) -> None:
    from analysis.export import open_export
    from analysis.nvtx import nvtx_ranges

    args = ["run", "char", "--device", "cpu", "--nsys", "--nsys-capture", "measured", "--no-nsys-baseline"]
    result = runner.invoke(app, [*args, "--steps", "3", "--warmup", "2", "--format", "json"])
    assert result.exit_code == 0, result.output
    (sqlite,) = (in_tmp / "nsys_profiles").glob("*.sqlite")
    ranges = nvtx_ranges(open_export(sqlite), names=["forward"])
    assert sorted(ranges["payload"].astype(int)) == [2, 3, 4]  # steps 0 and 1 were warmup
    tables = json.loads(result.stdout)
    assert {r["Phase"]: r["Steps"] for r in tables["NVTX vs in-process timers"]} == dict.fromkeys(PHASES, 3)
    assert "nsys overhead (one run each; `harness overhead` alternates repeats)" not in tables


def test_unwritable_profile_dir_is_one_line(in_tmp: Path) -> None:
    (in_tmp / "file").write_text("x")
    args = ["run", "char", "--device", "cpu", "--nsys", "--profile-dir", str(in_tmp / "file" / "profiles")]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    folder = in_tmp / "file" / "profiles"
    assert result.output.strip().splitlines() == [
        f"error: cannot create profile folder {folder}: Not a directory; pass --profile-dir"
    ]
