"""`harness diff`: trace diffs of real exports, per-phase verdicts of runs, --gate, markdown, baselines."""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import NsysRun, measure_drift
from typer.testing import CliRunner

from analysis.compare.diff import diff_ranges, diff_totals, phase_verdicts
from analysis.trace.opening import open_trace
from harness.cli import app
from harness.core.records import ModelInfo, RunConfig, RunResult, StepRecord
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()
SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
CPU_TRAIN = SHARED / "nsys" / "cpu-train" / "report.sqlite"
PHASES = {"forward": 10_000_000, "backward": 20_000_000, "optimizer": 5_000_000}


def make_run(
    run_id: str, *, noise: float, backward_scale: float = 1.0, steps: int = 30, seed: int = 0
) -> RunResult:
    rng = np.random.default_rng(seed)
    records = []
    for i in range(steps + 2):
        phases = {
            p: int(ns * (backward_scale if p == "backward" else 1.0) * (1 + noise * rng.standard_normal()))
            for p, ns in PHASES.items()
        }
        records.append(StepRecord(i, i < 2, phases))
    return RunResult(
        run_id=run_id,
        config=RunConfig(model="tiny", warmup=2, steps=steps),
        status="ok",
        device="cpu",
        model=ModelInfo("transformer", 64, 256, 2, 2, 1000, 64, 100_000),
        steps=records,
    )


def steps_of(result: RunResult) -> pd.DataFrame:
    return pd.DataFrame(
        [(s.step, p, ns, s.warmup) for s in result.steps for p, ns in s.phases.items()],
        columns=["step", "phase", "duration_ns", "warmup"],
    )


@pytest.fixture
def slow_pair(tmp_db: str) -> tuple[str, str]:
    store = ResultsStore(tmp_db)
    measure_drift(store, make_run("aa", noise=0.01, seed=5))
    save_run(store, make_run("base-1", noise=0.01, seed=1))
    save_run(store, make_run("slow-1", noise=0.01, backward_scale=1.10, seed=2))
    return "base-1", "slow-1"


@pytest.fixture
def noisy_pair(tmp_db: str) -> tuple[str, str]:
    store = ResultsStore(tmp_db)
    measure_drift(store, make_run("aa", noise=0.40, steps=5, seed=6), spread=0.05)
    save_run(store, make_run("noisy-a", noise=0.40, steps=5, seed=3))
    save_run(store, make_run("noisy-b", noise=0.40, backward_scale=1.10, steps=5, seed=4))
    return "noisy-a", "noisy-b"


def test_verdicts_known_slowdown_in_backward() -> None:
    a = steps_of(make_run("a", noise=0.01, seed=1))
    b = steps_of(make_run("b", noise=0.01, backward_scale=1.10, seed=2))
    v = {x.phase: x for x in phase_verdicts(a, b)}
    assert v["backward"].verdict == "regression"
    assert 8 < v["backward"].comparison.effect_pct < 12
    assert v["backward"].comparison.ci_low_pct > 5
    assert v["forward"].verdict != "regression" or v["forward"].comparison.effect_pct < 2
    assert v["step (sum)"].verdict == "regression"  # backward is 57% of the step: +5.7%
    assert v["forward"].comparison.baseline_samples == 30  # warm-up steps left out


def test_verdicts_noise_larger_than_change_is_inconclusive() -> None:
    a = steps_of(make_run("a", noise=0.40, steps=5, seed=3))
    b = steps_of(make_run("b", noise=0.40, backward_scale=1.10, steps=5, seed=4))
    v = {x.phase: x for x in phase_verdicts(a, b)}
    assert v["backward"].verdict == "inconclusive"
    assert v["backward"].comparison.noise_pct > 10


def test_cli_gate_fails_on_regression(slow_pair: tuple[str, str]) -> None:
    r = runner.invoke(app, ["diff", *slow_pair, "--gate", "5"], env={"COLUMNS": "160"})
    assert r.exit_code == 1, r.output
    assert "regression" in r.stdout and "backward" in r.stdout
    assert "gate: regression beyond 5%: backward +" in r.stderr
    r = runner.invoke(app, ["diff", *slow_pair, "--gate", "20"])
    assert r.exit_code == 0, r.output


def test_cli_gate_passes_inconclusive(noisy_pair: tuple[str, str]) -> None:
    r = runner.invoke(app, ["diff", *noisy_pair, "--gate", "5", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    (phases,) = [v for k, v in doc.items() if k.startswith("Phases")]
    by = {row["Phase"]: row for row in phases}
    assert by["backward"]["Verdict"] == "inconclusive"
    assert set(by) == {"forward", "backward", "optimizer", "overall (step)"}


def test_cli_markdown_and_baseline(slow_pair: tuple[str, str]) -> None:
    r = runner.invoke(app, ["baseline", "tag", "main", "base"])  # a unique prefix
    assert r.exit_code == 0, r.output
    assert "baseline:main = base-1" in r.stdout
    r = runner.invoke(app, ["baseline", "list", "--format", "json"])
    assert json.loads(r.stdout)[0]["run_id"] == "base-1"
    r = runner.invoke(app, ["diff", "baseline:main", "slow-1", "--format", "markdown"])
    assert r.exit_code == 0, r.output
    assert "**A:** `baseline:main (base-1)`" in r.stdout
    lines = [line for line in r.stdout.splitlines() if line.startswith("| backward |")]
    assert len(lines) == 1 and "| regression |" in lines[0]
    assert "| Phase | Verdict | Mean A (ms) |" in r.stdout
    r = runner.invoke(app, ["diff", "baseline:nope", "slow-1"])
    assert r.exit_code == 2 and "no baseline named 'nope'" in r.stderr


def test_a_baseline_given_by_its_name_alone_is_pointed_to(slow_pair: tuple[str, str]) -> None:
    """`diff main slow-1` after `baseline tag main …`: no run is called main, and the error says that
    `baseline:main` names it; a name that is neither still points to `harness runs`."""
    assert runner.invoke(app, ["baseline", "tag", "main", "base-1"]).exit_code == 0
    r = runner.invoke(app, ["diff", "main", "slow-1"])
    assert r.exit_code == 2
    assert r.stderr == "error: no run with id 'main'; `baseline:main` names the baseline\n"
    r = runner.invoke(app, ["diff", "mian", "slow-1"])
    assert r.exit_code == 2 and r.stderr == "error: no run with id 'mian'; `harness runs` lists the runs\n"


def test_cli_gate_needs_runs(slow_pair: tuple[str, str]) -> None:
    r = runner.invoke(app, ["diff", str(CPU_TRAIN), slow_pair[1], "--gate", "5"])
    assert r.exit_code == 2 and "--gate needs two runs or two exports" in r.stderr


def derived_copy(tmp_path: Path, phase: str, scale: float) -> Path:
    """The CPU fixture with one phase's NVTX ranges `scale` times as long."""
    out = tmp_path / "derived.sqlite"
    shutil.copy(CPU_TRAIN, out)
    out.chmod(0o644)
    with sqlite3.connect(out) as db:
        (sid,) = db.execute("SELECT id FROM StringIds WHERE value = ?", (phase,)).fetchone()
        db.execute(
            "UPDATE NVTX_EVENTS SET end = start + CAST((end - start) * ? AS INTEGER) WHERE textId = ?",
            (scale, sid),
        )
    return out


def test_export_diff_against_derived_copy(tmp_path: Path) -> None:
    """A real export against a copy with backward ranges 1.5× as long (the same steps otherwise)."""
    derived = derived_copy(tmp_path, "backward", 1.5)
    with open_trace(CPU_TRAIN) as a, open_trace(derived) as b:
        d = diff_ranges(a, b)
    assert d["Name"].iloc[0] == "backward"  # the only change, so the largest
    top = d.iloc[0]
    assert top["Change"] == "changed" and top["Instances A"] == top["Instances B"] == 8
    assert top["Total Time A (ns)"] == 85_643_923
    assert abs(top["Δ Total Time (%)"] - 50) < 0.01
    assert (d["Change"].iloc[1:] == "same").all()
    assert set(d["Name"]) == {"step", "forward", "backward", "optimizer"}

    r = runner.invoke(app, ["diff", str(CPU_TRAIN), str(derived), "--format", "csv"])
    assert r.exit_code == 0, r.output
    # one tidy CSV: the `table` column names each row's table
    tidy = pd.read_csv(io.StringIO(r.stdout))
    assert tidy.columns[0] == "table"
    assert list(tidy["table"].unique()) == [
        "Headline (B against A)",
        "NVTX ranges (sorted by |Δ Total Time|)",
    ]
    nvtx = tidy[tidy["table"] == "NVTX ranges (sorted by |Δ Total Time|)"].iloc[0]
    assert (nvtx["Name"], nvtx["Change"], nvtx["Total Time A (ns)"]) == ("backward", "changed", 85_643_923)
    head = tidy[tidy["table"] == "Headline (B against A)"].iloc[0]
    assert head.iloc[1:4].tolist() == ["wall_span", "wall span", "ns"] and head.iloc[4] == 291_598_353
    # --out DIR: one CSV per table
    folder = tmp_path / "csv"
    r = runner.invoke(app, ["diff", str(CPU_TRAIN), str(derived), "-f", "csv", "--out", str(folder)])
    assert r.exit_code == 0, r.output
    files = sorted(p.name for p in folder.iterdir())
    assert files == ["01-headline-b-against-a.csv", "02-nvtx-ranges-sorted-by-total-time.csv"]
    per_table = pd.read_csv(folder / files[1])
    assert per_table.iloc[0]["Name"] == "backward" and "table" not in per_table.columns
    # a folder holding an earlier command's tables: those it does not write again are said, not passed
    # over (a script reading the folder would take them for this diff's) and not removed (not its files)
    (folder / "03-cpu-operators-sorted-by-total-time.csv").write_text("Name\nold\n")
    r = runner.invoke(app, ["diff", str(CPU_TRAIN), str(derived), "-f", "csv", "--out", str(folder)])
    assert r.exit_code == 0, r.output
    assert [line for line in r.stderr.splitlines() if line.startswith("warning:")] == [
        f"warning: {folder} also holds 03-cpu-operators-sorted-by-total-time.csv, not written by this "
        "command (an earlier one's): remove them, or give an empty folder"
    ]
    assert (folder / "03-cpu-operators-sorted-by-total-time.csv").read_text() == "Name\nold\n"


def test_diff_totals_added_removed() -> None:
    a = pd.DataFrame({"name": ["k1", "k2"], "count": [2, 3], "total_ns": [100, 50]})
    b = pd.DataFrame({"name": ["k2", "k3"], "count": [3, 1], "total_ns": [50, 400]})
    d = diff_totals(a, b).set_index("Name")
    assert list(d.index) == ["k3", "k1", "k2"]
    assert d.loc["k3", "Change"] == "added" and np.isnan(d.loc["k3", "Δ Total Time (%)"])
    assert d.loc["k1", "Change"] == "removed" and d.loc["k1", "Δ Total Time (%)"] == -100
    assert d.loc["k2", "Change"] == "same" and d.loc["k2", "Δ Instances"] == 0


@pytest.mark.slow
@pytest.mark.xdist_group("nsys-tiny")
def test_export_diff_against_fresh_run(nsys_tiny: NsysRun) -> None:
    """The CPU fixture against a run made now: same phase ranges, other counts and times."""
    r = runner.invoke(
        app, ["diff", str(CPU_TRAIN), nsys_tiny.run_id, "--db", nsys_tiny.db, "--format", "json"]
    )
    assert r.exit_code == 0, r.output
    ranges = {row["Name"]: row for row in json.loads(r.stdout)["NVTX ranges (sorted by |Δ Total Time|)"]}
    for phase in ("forward", "backward", "optimizer"):
        assert ranges[phase]["Instances A"] == 8 and ranges[phase]["Instances B"] == 3
        assert ranges[phase]["Total Time B (ns)"] > 0


KINETO = SHARED / "kineto"


def test_step_gpu_diff_equals_hta_trace_diff() -> None:
    """HTA TraceDiff.compare_traces(device_type=GPU) on the diff-control / diff-test pair: counts equal,
    totals equal (HTA in µs, ours in ns) for every name of both sides, first step ProfilerStep#1009."""
    from analysis.compare.diff import diff_step

    with (
        open_trace(KINETO / "diff-control" / "control.json.gz") as a,
        open_trace(KINETO / "diff-test" / "test.json.gz") as b,
    ):
        d = diff_step(a, b, gpu_only=True).set_index("Name")
    expected = pd.read_csv(KINETO / "diff-test" / "expected" / "trace_diff_compare_traces_gpu.csv")
    expected = expected.set_index("name")
    assert set(d.index) == set(expected.index) and len(d) == 201
    d = d.loc[expected.index]
    assert (d["Instances A"].to_numpy() == expected["Control_counts"].to_numpy()).all()
    assert (d["Instances B"].to_numpy() == expected["Test_counts"].to_numpy()).all()
    assert (d["Total Time A (ns)"].to_numpy() == expected["Control_total_duration"].to_numpy() * 1000).all()
    assert (d["Total Time B (ns)"].to_numpy() == expected["Test_total_duration"].to_numpy() * 1000).all()
    assert (d["Δ Total Time (ns)"].to_numpy() == expected["diff_duration"].to_numpy() * 1000).all()
    assert d.loc["Memcpy DtoD (Device -> Device)", "Instances B"] == 768


@pytest.mark.parametrize("side", ["control", "test"])
def test_step_ops_summary_equals_hta(side: str) -> None:
    """HTA LabeledTrace.get_ops_summary per trace: every (cat, name), count and total (µs ↔ ns)."""
    from analysis.compare.diff import step_ops_summary

    path = KINETO / f"diff-{side}" / f"{side}.json.gz"
    with open_trace(path) as t:
        ours = step_ops_summary(t).set_index(["cat", "name"])
    expected = pd.read_csv(KINETO / "diff-test" / "expected" / f"trace_diff_{side}_ops_summary.csv")
    expected = expected.set_index(["cat", "name"])
    assert set(ours.index) == set(expected.index)
    ours = ours.loc[expected.index]
    assert (ours["count"].to_numpy() == expected["counts"].to_numpy()).all()
    assert (ours["total_ns"].to_numpy() == expected["total_duration"].to_numpy() * 1000).all()


def test_step_diff_all_devices_equals_hta() -> None:
    from analysis.compare.diff import diff_step

    with (
        open_trace(KINETO / "diff-control" / "control.json.gz") as a,
        open_trace(KINETO / "diff-test" / "test.json.gz") as b,
    ):
        d = diff_step(a, b).set_index("Name")
    expected = pd.read_csv(KINETO / "diff-test" / "expected" / "trace_diff_compare_traces.csv").set_index(
        "name"
    )
    assert set(d.index) == set(expected.index)
    d = d.loc[expected.index]
    assert (d["Instances A"].to_numpy() == expected["Control_counts"].to_numpy()).all()
    assert (d["Instances B"].to_numpy() == expected["Test_counts"].to_numpy()).all()
    assert (d["Total Time A (ns)"].to_numpy() == expected["Control_total_duration"].to_numpy() * 1000).all()
    assert (d["Total Time B (ns)"].to_numpy() == expected["Test_total_duration"].to_numpy() * 1000).all()


def test_diff_figure_bars(tmp_path: Path) -> None:
    from analysis.dashboard.diff import diff_figure

    derived = derived_copy(tmp_path, "forward", 0.5)
    with open_trace(CPU_TRAIN) as a, open_trace(derived) as b:
        fig = diff_figure(diff_ranges(a, b))
    bar = fig.data[0]
    assert list(bar.y)[-1] == "forward"  # the largest change on top
    assert bar.x[-1] == pytest.approx(-155_012_301 / 2 / 1e6, abs=1e-3)  # ms, half of forward's total
    assert list(bar.x[:-1]) == [0, 0, 0]


def test_a_run_whose_export_is_gone_is_not_told_to_profile_it(tmp_db: str, tmp_path: Path) -> None:
    store = ResultsStore(tmp_db)
    gone = tmp_path / "moved.sqlite"
    save_run(store, make_run("base-1", noise=0.01, seed=1), profiler="nsys", nsys_sqlite=str(gone))
    save_run(store, make_run("slow-1", noise=0.01, seed=2))
    r = runner.invoke(app, ["diff", "base-1", "slow-1", "--format", "json"])
    assert r.exit_code == 0, r.output
    notes = json.loads(r.stdout)["notes"]
    lost = f"base-1 has lost its export ({gone}: no such file, moved or deleted): phase verdicts only"
    assert lost in notes
    assert "slow-1 has no export: phase verdicts only (profile it with --nsys)" in notes


def test_a_run_whose_export_path_is_no_file_is_not_said_moved_or_deleted(tmp_db: str, tmp_path: Path) -> None:
    """A stored export path that is there but no file (a folder; an imported file's /dev/zero or a pipe) was
    said to be "no such file, moved or deleted"; it is said not to be a file, and is never read."""
    store = ResultsStore(tmp_db)
    gone = tmp_path / "moved.nsys-rep"
    save_run(store, make_run("base-1", noise=0.01, seed=1), profiler="nsys", nsys_sqlite=str(tmp_path),
             nsys_rep=str(gone))  # fmt: skip
    save_run(store, make_run("slow-1", noise=0.01, seed=2))
    r = runner.invoke(app, ["diff", "base-1", "slow-1", "--format", "json"])
    assert r.exit_code == 0, r.output
    lost = (
        f"base-1 has lost its export ({gone}: no such file, moved or deleted; {tmp_path}: not a file): phase "
        "verdicts only"
    )
    assert lost in json.loads(r.stdout)["notes"]


REFUSED_NAMES = [("a,b", "':' or ','"), ("a:b", "':' or ','"), ("x\x1b[31m", "control"), (" ", "empty")]


@pytest.mark.parametrize(("name", "why"), REFUSED_NAMES)
def test_a_baseline_name_diff_could_not_find_again_is_refused(
    slow_pair: tuple[str, str], name: str, why: str
) -> None:
    r = runner.invoke(app, ["baseline", "tag", name, "base-1"])
    assert r.exit_code == 2 and r.stdout == "" and "\x1b" not in r.output
    (line,) = r.stderr.splitlines()
    assert line.startswith("error: ") and "is not a baseline name" in line and why in line
    assert runner.invoke(app, ["baseline", "list", "--format", "json"]).stdout.strip() == "[]"


def test_runs_of_unlike_configurations_are_said_to_be_so(slow_pair: tuple[str, str]) -> None:
    from dataclasses import replace

    bigger = make_run("batch-8", noise=0.01, seed=3)
    bigger.config = replace(bigger.config, batch_size=8)
    save_run(ResultsStore(), bigger, profiler="nsys", nsys_mode="light")
    notes = json.loads(runner.invoke(app, ["diff", "base-1", "batch-8", "--format", "json"]).stdout)["notes"]
    assert (
        "A and B are not the same configuration: batch size 4 → 8, profiler none → nsys light; their times "
        "differ by that too"
    ) in notes  # a backward 20% slower is the batch's, not a change of code
    same = json.loads(runner.invoke(app, ["diff", *slow_pair, "--format", "json"]).stdout)["notes"]
    assert not [n for n in same if "not the same configuration" in n]


def test_a_gate_passed_on_a_phase_it_could_not_judge_says_so(tmp_db: str) -> None:
    """Two runs a side whose forward (1 to 3 ms of a 152 ms step) scatters: `--gate 6` passed without a
    word, the whole step's interval (+5.1%) being inside 6% though forward's reached +5287%; the gate
    fails on a phase as on the step, so a pass it could not judge for a phase is said as the step's is."""
    store = ResultsStore(tmp_db)
    for run_id, forward in (("a1", 1_000_000), ("a2", 3_000_000), ("b1", 800_000), ("b2", 3_600_000)):
        phases = {"backward": 100_000_000, "optimizer": 50_000_000}
        steps = [StepRecord(i, i < 2, {"forward": forward + i, **phases}) for i in range(5)]
        save_run(
            store,
            RunResult(
                run_id=run_id,
                config=RunConfig(model="tiny", warmup=2, steps=3),
                status="ok",
                device="cpu",
                model=ModelInfo("transformer", 64, 256, 2, 2, 1000, 64, 100_000),
                steps=steps,
            ),
        )
    r = runner.invoke(app, ["diff", "a1,a2", "b1,b2", "--gate", "6", "--format", "json"])
    assert r.exit_code == 0, r.output
    (phases,) = [v for k, v in json.loads(r.stdout).items() if k.startswith("Phases")]
    high = {row["Phase"]: row["CI High (%)"] for row in phases}
    assert {row["Verdict"] for row in phases} == {"inconclusive"}
    assert high["overall (step)"] < 6 < high["forward"] and high["backward"] < 6
    assert r.stderr.splitlines()[-1] == (
        f"warning: gate: passed, but the interval of forward {high['forward']:+.1f}% reaches past 6%: a "
        "regression of 6% could not be told from the drift between runs; give more runs a side (`harness "
        "diff A1,A2,A3 B1,B2,B3`)"
    )
    r = runner.invoke(app, ["diff", "a1,a2", "b1,b2", "--gate", "6000", "--format", "json"])
    assert r.exit_code == 0 and "warning" not in r.stderr, r.stderr
