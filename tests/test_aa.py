"""The A/A suite: identical CPU runs, each in a fresh process (tests/data/aa/char-cpu.csv: 46 runs of
`char` made one after the other by tests/data/aa/record.py, as `harness run char --device cpu --repeats 46`
makes them, on a 2-core machine shared with other work whose load changed during the recording), compared
as `harness diff` compares them.

Taken two by two (23 pairs), one run a side judged against the drift between runs measured for the
configuration (the recording's other runs, made together): at 95 % at most one pair may be called a
regression or an improvement, and `--gate 5` fails at most one. Several runs a side (`diff A1,A2,A3
B1,B2,B3`) are judged by their own spread; a planted 20 % slowdown of a side's steps fails the gate where the
runs a side are enough for the drift this machine showed, and is inconclusive, never a pass of the gate by
a verdict of "no regression", where they are not.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.compare.overhead import STEP_SUM
from harness.cli import app
from harness.core.records import RunConfig, RunResult, StepRecord
from harness.experiments import diff as hd
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

AA = Path(__file__).parent / "data" / "aa" / "char-cpu.csv"
DEVICE = "shared 2-core CPU"
runner = CliRunner()


def recorded() -> list[dict[int, dict[str, int]]]:
    """Each recorded run's measured steps: step -> phase -> duration_ns, in the order the runs were made."""
    runs: dict[int, dict[int, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    with AA.open() as f:
        for row in csv.DictReader(f):
            runs[int(row["run"])][int(row["step"])][row["phase"]] = int(row["duration_ns"])
    return [runs[i] for i in sorted(runs)]


def result(run_id: str, steps: dict[int, dict[str, int]], scale: float = 1.0) -> RunResult:
    config = RunConfig(model="char", device="cpu", warmup=2, steps=len(steps))
    records = [
        StepRecord(s, False, {p: round(ns * scale) for p, ns in ph.items()}) for s, ph in steps.items()
    ]
    return RunResult(run_id, config, "ok", device="cpu", device_name=DEVICE, steps=records)


@pytest.fixture(scope="module")
def aa_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[tuple[str, str]]]:
    """The store: the recording's runs as one experiment (r-0, r-1, …), and each run's steps made 20 %
    slower as a run of its own (slow-0, …, outside the experiment: no part of the drift)."""
    db = f"sqlite:///{tmp_path_factory.mktemp('aa')}/results.sqlite"
    store = ResultsStore(db)
    runs = recorded()
    for i, steps in enumerate(runs):
        save_run(store, result(f"r-{i}", steps), experiment="repeats-aa")
        save_run(store, result(f"slow-{i}", steps, scale=1.2))
    pairs = [(f"r-{i}", f"r-{i + 1}") for i in range(0, len(runs) - 1, 2)]
    return db, pairs


def verdicts(db: str, a: str, b: str) -> hd.DiffResult:
    store = ResultsStore(db, readonly=True)
    return hd.diff(hd.resolve(a, lambda: store), hd.resolve(b, lambda: store), store=store)


def test_the_recording_has_twenty_pairs_and_more() -> None:
    runs = recorded()
    assert len(runs) // 2 >= 20
    assert {p for r in runs for s in r.values() for p in s} == {"forward", "backward", "optimizer"}


def test_identical_runs_are_called_different_at_most_once_in_twenty_pairs(aa_store: tuple) -> None:
    db, pairs = aa_store
    called = []
    for a, b in pairs:
        found = verdicts(db, a, b)
        whole = next(v for v in found.verdicts if v.phase == STEP_SUM)
        # one run a side, judged against the drift of the recording's other 44 runs
        assert whole.comparison.basis == "drift" and whole.comparison.drift_runs == len(pairs) * 2 - 2
        if whole.verdict in ("regression", "improvement"):
            called.append((a, b, whole.comparison.effect_pct))
    assert len(called) <= 1, called


def test_the_gate_passes_identical_runs_at_most_one_failing(aa_store: tuple) -> None:
    db, pairs = aa_store
    failed = [a for a, b in pairs if hd.gate_failures(verdicts(db, a, b), 5)]
    assert len(failed) <= 1, failed


def sides(pairs: list[tuple[str, str]], n: int, slow: bool = False) -> tuple[str, str]:
    """The first `n` pairs as two sides of several runs: their A runs, and their B runs (or, `slow`, the
    A runs' own steps made 20 % slower)."""
    a = [p[0] for p in pairs[:n]]
    b = [x.replace("r-", "slow-") for x in a] if slow else [p[1] for p in pairs[:n]]
    return ",".join(a), ",".join(b)


def test_several_runs_a_side_are_judged_by_their_spread(aa_store: tuple) -> None:
    db, pairs = aa_store
    called = []
    for i in range(0, len(pairs) - 2, 3):
        a, b = sides(pairs[i:], 3)
        whole = next(v for v in verdicts(db, a, b).verdicts if v.phase == STEP_SUM)
        assert whole.comparison.basis == "runs"
        assert (whole.comparison.baseline_runs, whole.comparison.treatment_runs) == (3, 3)
        if whole.verdict != "inconclusive":
            called.append((a, b, whole.comparison.effect_pct))
    assert len(called) <= 1, called


def test_a_planted_20_percent_slowdown_fails_the_gate_with_the_runs_this_drift_needs(aa_store: tuple) -> None:
    db, pairs = aa_store
    a, slow = sides(pairs, len(pairs), slow=True)
    (failed,) = [v for v in hd.gate_failures(verdicts(db, a, slow), 5) if v.phase == STEP_SUM]
    assert failed.comparison.effect_pct == pytest.approx(20.0, abs=0.01)
    assert failed.comparison.ci_low_pct > 0
    a, b = sides(pairs, len(pairs))  # the same runs against their partners: the A/A of as many a side
    assert hd.gate_failures(verdicts(db, a, b), 5) == []


def test_one_run_a_side_cannot_tell_a_20_percent_slowdown_here_and_the_gate_says_so(aa_store: tuple) -> None:
    db, pairs = aa_store
    a = pairs[0][0]
    args = ["diff", a, a.replace("r-", "slow-"), "--gate", "5", "--db", db]
    slow = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert slow.exit_code == 0, slow.output  # inconclusive: the drift between runs here is wider than 20 %
    assert "a regression of 5% could not be told from the drift between runs" in slow.output
    assert "drift between runs measured for char train fp32 batch 4" in slow.output


def test_diff_gate_on_the_command_line_exits_1_on_several_runs_made_slower(aa_store: tuple) -> None:
    db, pairs = aa_store
    a, slow = sides(pairs, len(pairs), slow=True)
    r = runner.invoke(app, ["diff", a, slow, "--gate", "5", "--db", db], env={"COLUMNS": "200"})
    assert r.exit_code == 1, r.output
    assert "gate: regression beyond 5%" in r.output
    assert f"{len(pairs)} runs a side" in r.output


def test_one_run_a_side_without_a_drift_measured_gets_no_verdict_and_no_gate(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/results.sqlite"
    store = ResultsStore(db)
    runs = recorded()
    save_run(store, result("a", runs[0]))
    save_run(store, result("b", runs[1], scale=1.2))
    found = verdicts(db, "a", "b")
    assert {v.comparison.basis for v in found.verdicts} == {"no drift"}
    assert {v.verdict for v in found.verdicts} == {"inconclusive"}
    r = runner.invoke(app, ["diff", "a", "b", "--gate", "5", "--db", db], env={"COLUMNS": "200"})
    assert r.exit_code != 0
    assert "no drift between runs measured" in r.output


def test_the_runs_of_run_repeats_are_a_side_by_their_experiment(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/results.sqlite"
    store = ResultsStore(db)
    runs = recorded()
    for i, steps in enumerate(runs[:12]):
        save_run(store, result(f"r-{i}", steps), experiment="repeats-one" if i < 6 else "repeats-two")
    whole = next(v for v in verdicts(db, "repeats-one", "repeats-two").verdicts if v.phase == STEP_SUM)
    assert (whole.comparison.basis, whole.comparison.baseline_runs, whole.comparison.treatment_runs) == (
        "runs", 6, 6,
    )  # fmt: skip
    r = runner.invoke(app, ["diff", "repeats-none", "repeats-one", "--db", db])
    assert r.exit_code == 2 and "no runs in experiment 'repeats-none'" in r.output


def test_several_runs_on_one_side_and_no_drift_measured_say_what_the_verdicts_rest_on(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/results.sqlite"
    store = ResultsStore(db)
    runs = recorded()
    save_run(store, result("a1", runs[0]))
    save_run(store, result("a2", runs[1]))
    save_run(store, result("b", runs[2], scale=1.2))
    r = runner.invoke(app, ["diff", "a1,a2", "b", "--db", db], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert "2 runs and 1 run," in r.output
    assert "one run a side" not in r.output and "no verdict" not in r.output
