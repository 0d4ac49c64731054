"""`harness overhead --profiler torch`: torch.profiler's slowdown measured as nsys's is (alternated runs in
fresh processes, the same intervals and verdicts), stored with profiler "torch", and the overhead panel
naming each profiler."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from dashboard_data import result
from procs import fixed_phase_times
from typer.testing import CliRunner

from analysis.dashboard.overhead import overhead_panel
from analysis.dashboard.panel import DashboardData
from harness.cli import app
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

PHASES = ("forward", "backward", "optimizer")
runner = CliRunner()


@pytest.mark.slow
def test_overhead_of_torch_profiler_for_real(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_db: str
) -> None:
    monkeypatch.chdir(tmp_path)
    # every phase of the plain run measures 1 ms, of the run under torch.profiler 1.5 ms: +50.0% with no
    # spread, so one verdict is right. The runs, the profiler and the store are real.
    hook = fixed_phase_times(tmp_path / "inject", 1_000_000, 1_500_000)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([hook, os.environ.get("PYTHONPATH", "")]))
    args = ["overhead", "char", "--device", "cpu", "--profiler", "torch", "--repeats", "1", "--steps", "3"]
    got = runner.invoke(app, [*args, "--warmup", "1", "--format", "json"], catch_exceptions=False)
    assert got.exit_code == 0, got.output
    rows = json.loads(got.stdout)
    assert [r["Phase"] for r in rows] == [*PHASES, "step (sum)"]
    for r, ms in zip(rows, (1, 1, 1, 3), strict=True):  # the step: its three phases
        assert (r["no profiler Avg (ns)"], r["torch Avg (ns)"]) == (ms * 1_000_000, ms * 1_500_000), r
        assert r["torch verdict"] == "torch adds 50.0% (CI +50.0…+50.0%)", r
    listed = json.loads(runner.invoke(app, ["runs", "--format", "json"]).stdout)
    assert [r["profiler"] for r in listed] == ["none", "torch"]
    assert listed[1]["baseline_run_id"] == listed[0]["run_id"]
    assert len({r["experiment"] for r in listed}) == 1 and listed[0]["experiment"].startswith("overhead-")
    trace = Path(listed[1]["artifacts"]["trace"])
    assert trace.parent == tmp_path / "torch_profiles" and trace.is_file()
    # `harness show` pairs them under the same labels
    shown = json.loads(runner.invoke(app, ["show", listed[1]["run_id"], "--format", "json"]).stdout)
    (pair,) = [v for k, v in shown.items() if k.startswith("overhead of")]
    assert "no profiler Avg (ns)" in pair[0] and "torch Avg (ns)" in pair[0]


def test_nsys_options_with_torch_are_a_usage_error(tmp_db: str) -> None:
    args = ["overhead", "char", "--device", "cpu", "--profiler", "torch", "--nsys-mode", "full"]
    got = runner.invoke(app, args)
    assert got.exit_code == 2 and "Traceback" not in got.output
    assert "--nsys-mode, --nsys-arg and --nsys-capture are for --profiler nsys" in got.output


def test_overhead_panel_names_the_profiler(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    base = [(1_000_000, 2_000_000, 500_000)] * 2
    slow = [(1_300_000, 2_600_000, 650_000)] * 2
    save_run(store, result("tiny-fp32-t0", "tiny", "fp32", base), experiment="overhead-t")
    save_run(store, result("tiny-fp32-t1", "tiny", "fp32", slow), profiler="torch", experiment="overhead-t")
    panel = overhead_panel(DashboardData(runs=store.runs(), steps=store.step_timings()))
    base_bars, torch_bars, verdicts = panel.figure.data
    assert (base_bars.name, torch_bars.name) == ("no profiler", "torch")
    assert list(torch_bars.y) == pytest.approx([1.3, 2.6, 0.65, 4.55])
    assert list(verdicts.text) == ["adds +30.0% (CI +30.0…+30.0%)"] * 4
    assert "Whole steps: torch adds 30.0% (CI +30.0…+30.0%)." in panel.notes
    assert panel.notes[0].startswith("1 run without a profiler and 1 with one (torch), measured steps only.")
