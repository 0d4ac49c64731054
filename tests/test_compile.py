"""torch.compile: compile time (the first step) kept apart, eager against compiled side by side.

Everything but the one end-to-end run is checked on runs stored with known step times (real RunResult
objects in a real results database): compiling tiny on this CPU takes a minute or more.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from dashboard_data import MODELS
from typer.testing import CliRunner

from analysis.compile import COMPILE, compile_comparison
from analysis.dashboard.compile import compile_panel
from analysis.dashboard.panel import DashboardData
from harness.cli import app
from harness.core.records import RunConfig, RunResult, StepRecord
from harness.execution.compiled import compile_table, record_first_step
from harness.store.results import ResultsStore

MS = 1_000_000
runner = CliRunner()


def made(run_id: str, compiled: bool, first: tuple[int, int, int], measured: list[tuple[int, int, int]]):
    """A stored-run-shaped result: one warmup step `first`, then `measured` (forward, backward, optimizer)."""
    steps = [StepRecord(0, True, dict(zip(("forward", "backward", "optimizer"), first, strict=True)))]
    steps += [
        StepRecord(i + 1, False, dict(zip(("forward", "backward", "optimizer"), m, strict=True)))
        for i, m in enumerate(measured)
    ]
    config = RunConfig("tiny", device="cpu", compile=compiled, warmup=1, steps=len(measured))
    result = RunResult(run_id, config, "ok", device="cpu", model=MODELS["tiny"], steps=steps)
    record_first_step(result)
    return result


EAGER = made(
    "tiny-eager",
    False,
    (12 * MS, 20 * MS, 5 * MS),
    [(10 * MS, 20 * MS, 5 * MS)] * 2 + [(12 * MS, 22 * MS, 5 * MS)],
)
COMPILED = made("tiny-compiled", True, (60_000 * MS, 9_000 * MS, 6 * MS), [(5 * MS, 10 * MS, 5 * MS)] * 3)


def test_first_step_is_compile_time_apart_from_the_median() -> None:
    assert COMPILED.extra["first_step_ns"] == 69_006 * MS
    # the median measured step is 20 ms: compilation is what the first step took beyond it
    assert COMPILED.extra["compile_ns"] == 69_006 * MS - 20 * MS
    assert COMPILED.extra["compile_phases_ns"] == {
        "forward": 59_995 * MS,
        "backward": 8_990 * MS,
        "optimizer": MS,
    }
    assert "compile_ns" not in EAGER.extra and EAGER.extra["first_step_ns"] == 37 * MS


def test_compile_forces_a_warmup_step() -> None:
    assert RunConfig("tiny", compile=True, warmup=0).warmup == 1
    assert RunConfig("tiny", compile=True, warmup=3).warmup == 3
    assert RunConfig("tiny", compile=False, warmup=0).warmup == 0
    assert replace(RunConfig("tiny", warmup=0), compile=True).warmup == 1


@pytest.fixture
def store(tmp_db: str) -> ResultsStore:
    store = ResultsStore(tmp_db)
    store.save(EAGER)
    store.save(COMPILED)
    # a profiled compiled run of the same configuration is not the steady state: left out of the pairing
    store.save(
        made("tiny-compiled-nsys", True, (1, 1, 1), [(MS, MS, MS)]), profiler="nsys", nsys_mode="light"
    )
    # a configuration with only an eager run has nothing to compare
    lone = made("tiny-lone", False, (1, 1, 1), [(MS, MS, MS)])
    lone.config.batch_size = 8
    store.save(lone)
    return store


def test_comparison_pairs_eager_and_compiled_of_the_same_configuration(store: ResultsStore) -> None:
    table = compile_table(store).set_index("phase")
    assert list(table.index) == ["forward", "backward", "optimizer", "step"]
    assert set(table["eager run"]) == {"tiny-eager"} and set(table["compiled run"]) == {"tiny-compiled"}
    assert table.loc["forward", "eager (ns)"] == 10 * MS and table.loc["forward", "compiled (ns)"] == 5 * MS
    assert table.loc["backward", "speed-up"] == pytest.approx(2.0)
    assert table.loc["optimizer", "speed-up"] == pytest.approx(1.0)
    assert table.loc["step", "eager (ns)"] == 35 * MS and table.loc["step", "speed-up"] == pytest.approx(1.75)
    assert table.loc["step", COMPILE] == COMPILED.extra["compile_ns"]  # the same figure as the run's own
    assert table.loc["forward", COMPILE] == 59_995 * MS
    assert table.loc["step", "eager first step (ns)"] == 37 * MS


def test_compare_compile_command(store: ResultsStore) -> None:
    result = runner.invoke(app, ["compare-compile", "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["phase"] for r in rows] == ["forward", "backward", "optimizer", "step"]
    assert rows[-1]["speed-up"] == pytest.approx(1.75)
    shown = runner.invoke(app, ["compare-compile", "--wide"], catch_exceptions=False).stdout
    assert "(ms)" in shown and "(ns)" not in shown and "speed-up" in shown and "1.750" in shown


def test_compare_compile_without_pairs_says_how(tmp_db: str) -> None:
    ResultsStore(tmp_db).save(EAGER)
    result = runner.invoke(app, ["compare-compile"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "harness run tiny --device cpu --compile" in " ".join(result.output.split())


def test_compile_panel(store: ResultsStore) -> None:
    data = DashboardData(runs=store.runs(), steps=store.step_timings())
    panel = compile_panel(data)
    eager, compiled = panel.figure.data
    assert (eager.name, compiled.name) == ("eager", "compiled")
    assert list(eager.y) == pytest.approx([10, 20, 5, 35]) and list(compiled.y) == pytest.approx(
        [5, 10, 5, 20]
    )
    assert list(compiled.text) == ["×2.00", "×2.00", "×1.00", "×1.75"]
    assert any("compile (first step) 68,986.000 ms" in n for n in panel.notes)
    assert compile_panel(DashboardData()).missing.startswith("no configuration run both eager and compiled")


def test_comparison_of_no_runs_is_empty() -> None:
    assert compile_comparison(DashboardData().runs, DashboardData().steps).empty


@pytest.mark.slow
def test_compile_run_shows_compile_time_apart(tmp_db: str) -> None:
    """The issue's command, for real: torch.compile on the CPU (about a minute for tiny)."""
    result = runner.invoke(
        app, ["run", "tiny", "--device", "cpu", "--compile", "--steps", "3"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert "compile (first step)" in result.stdout
    (run,) = ResultsStore(tmp_db).runs().to_dict("records")
    stored = ResultsStore(tmp_db).get(run["run_id"]).summary
    assert stored["compile_ns"] > 0 and stored["first_step_ns"] > stored["compile_ns"]
    shown = runner.invoke(app, ["show", run["run_id"], "--format", "json"], catch_exceptions=False)
    table = json.loads(shown.stdout)["compile (first step)"]
    assert table[-1]["phase"] == "step" and table[-1]["compile (first step) (ns)"] == stored["compile_ns"]
