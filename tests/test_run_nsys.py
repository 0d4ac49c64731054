"""`harness run --nsys`, the card's headline command, end to end with the real nsys. It is in `make test`:
a newcomer's first proof that nsys works here. The other end-to-end runs are tests/test_profile.py's."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.store.results import ResultsStore

pytestmark = [pytest.mark.nsys]
PHASES = ("forward", "backward", "optimizer")
runner = CliRunner()


def _counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Calls of the steps a run under nsys takes once, counted as the real ones run (each called through):
    the `nsys profile` command built, the profile folder checked, the export opened, a run stored."""
    from analysis.front import examine
    from harness.execution.nsys import launch
    from harness.profilers import nsys as profiler
    from harness.store.runs import RunsPart

    calls: Counter[str] = Counter()

    def count(owner: object, name: str, key: str) -> None:
        real = getattr(owner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[key] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    count(launch, "build_profile_command", "command built")
    count(profiler, "check_writable", "folder checked")
    count(examine, "open_trace", "export opened")  # examine's, and any other reading after the capture
    count(RunsPart, "_write", "run stored")
    return calls


def test_run_nsys_end_to_end(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from analysis.tables.nvtx import nvtx_ranges
    from analysis.trace.opening import open_trace

    calls = _counted(monkeypatch)
    args = ["run", "tiny", "--device", "cpu", "--nsys", "--steps", "3", "--warmup", "1"]
    result = runner.invoke(app, [*args, "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    # once per run: the command, the folder's check, the export's reading; the baseline and the run stored
    assert calls == {"command built": 1, "folder checked": 1, "export opened": 1, "run stored": 2}
    tables = json.loads(result.stdout)
    reps = list((in_tmp / "nsys_profiles").glob("*.nsys-rep"))
    sqlites = list((in_tmp / "nsys_profiles").glob("*.sqlite"))
    assert len(reps) == 1 and len(sqlites) == 1
    ranges = nvtx_ranges(open_trace(sqlites[0]), names=["step", *PHASES])
    for phase in PHASES:
        per_step = ranges[ranges["name"] == phase]["payload"].astype(int).value_counts().sort_index()
        assert list(per_step.index) == [0, 1, 2, 3] and set(per_step) == {1}  # once per step, warmup included
    agreement = {row["Phase"]: row for row in tables["NVTX vs in-process timers"]}
    assert set(agreement) == set(PHASES) and all(row["Steps"] == 3 for row in agreement.values())
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
    # the agreement: the export's ranges against the stored timers of the 3 measured steps (how far they
    # agree depends on how busy the machine was: not asserted)
    timers = ResultsStore(os.environ["HARNESS_DB"]).get(profiled["run_id"]).step_timings
    for phase, row in agreement.items():
        measured = ranges[(ranges["name"] == phase) & (ranges["payload"].astype(int) > 0)]
        by_nvtx = measured["duration_ns"].mean()
        by_timer = sum(t.duration_ns for t in timers if t.phase == phase and not t.warmup) / 3
        assert row["NVTX Avg (ns)"] == pytest.approx(by_nvtx)
        assert row["Timer Avg (ns)"] == pytest.approx(by_timer)
        assert row["Difference (%)"] == pytest.approx((by_nvtx - by_timer) / by_timer * 100)
    shown = json.loads(runner.invoke(app, ["show", profiled["run_id"], "--format", "json"]).stdout)
    # show writes the stored agreement as run writes it: its title, its columns, its figures
    assert {r["Phase"]: r["Difference (%)"] for r in shown["NVTX vs in-process timers"]} == pytest.approx(
        {phase: row["Difference (%)"] for phase, row in agreement.items()}
    )
    assert f"baseline run {baseline['run_id']} (no profiler): phases" in shown
    pair = shown[f"overhead of {profiled['run_id']} against {baseline['run_id']} (one run each)"]
    assert [r["Phase"] for r in pair] == [*PHASES, "step (sum)"]
    info = shown["run"]
    assert info["machine"].startswith("load average ")  # recorded for the profiled run too
    base_info = json.loads(
        runner.invoke(app, ["show", baseline["run_id"], "--format", "json"]).stdout
    )["run"]  # fmt: skip
    assert base_info["profiled runs"] == profiled["run_id"]
    assert "other processes took" in base_info["machine"]


@pytest.mark.slow
def test_folders_named_like_our_packages_in_the_working_folder_are_not_imported(
    in_tmp: Path, tmp_db: str
) -> None:
    """A user's `analysis/` (or the clone's own folder, run from its parent) beside the run: every child
    process imports the installed packages, not those folders."""
    for name in ("harness", "analysis", "workloads"):
        (in_tmp / name).mkdir()
    args = ["run", "tiny", "--device", "cpu", "--nsys", "--no-nsys-baseline", "--steps", "1", "--warmup", "0"]
    small = ["--batch-size", "1", "--context-length", "16"]
    result = runner.invoke(app, [*args, *small], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert ResultsStore(tmp_db, readonly=True).runs()["status"].tolist() == ["ok"]


def test_a_run_captured_without_nvtx_says_so_once(in_tmp: Path) -> None:
    """`--nsys-arg=--trace=osrt`: no NVTX in the export. The run is stored degraded and the health line and
    the degraded warning say why; no `error: no NVTX data …` line repeats it."""
    args = ["run", "char", "--device", "cpu", "--nsys", "--no-nsys-baseline", "--steps", "2", "--warmup", "1",
            "--nsys-arg=--trace=osrt"]  # fmt: skip
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 1, result.output
    said = [line for line in result.stderr.splitlines() if not line.startswith("progress:")]
    assert any("stored as degraded" in line and "NVTX vs timers" in line for line in said), said
    assert not any(line.startswith("error:") for line in said), said
    assert "no NVTX data" not in result.output
