"""The drift between runs (analysis.compare.drift) and how runs are compared with it: the pooled spread of
run means made together, Student's interval of B's runs against A's, one run a side against the measured
drift (never narrower than the steps' own), and no interval where none was measured."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from typer.testing import CliRunner

from analysis.compare.diff import phase_verdicts, unjudged
from analysis.compare.drift import (
    DRIFT,
    NO_DRIFT,
    RUNS,
    Drift,
    basis_words,
    compare_runs,
    drift_of,
    drifts,
    run_means,
)
from analysis.compare.overhead import STEP_SUM
from harness.cli import app
from harness.cli import run as run_cli
from harness.cli.terminal.progress import Progress
from harness.experiments.drift import key_of, stored_drift
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore


def test_drift_pools_the_squared_deviations_of_each_group_of_runs() -> None:
    d = drift_of([[100.0, 110.0], [200.0, 180.0, 220.0], [50.0]])  # a group of one run adds nothing
    a, b = np.log([100, 110]), np.log([200, 180, 220])
    ss = ((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()
    assert (d.df, d.runs) == (3, 5)
    assert d.ss == pytest.approx(ss)
    assert d.pct == pytest.approx((math.exp(math.sqrt(ss / 3)) - 1) * 100)


def test_one_run_a_side_without_a_drift_has_no_interval() -> None:
    c = compare_runs([100.0], [120.0])
    assert c.basis == NO_DRIFT
    assert c.effect_pct == pytest.approx(20.0)
    assert math.isnan(c.ci_low_pct) and math.isnan(c.ci_high_pct)
    assert basis_words(c) == "one run a side, no drift measured"


def test_one_run_a_side_is_judged_against_the_drift_measured() -> None:
    drift = drift_of([[100.0, 102.0, 98.0, 101.0]])  # df 3
    c = compare_runs([100.0], [110.0], drift)
    half = stats.t.ppf(0.975, 3) * math.sqrt(drift.variance * 2)
    d = math.log(1.1)
    assert c.basis == DRIFT
    assert c.ci_low_pct == pytest.approx((math.exp(d - half) - 1) * 100)
    assert c.ci_high_pct == pytest.approx((math.exp(d + half) - 1) * 100)
    assert basis_words(c).startswith("one run a side, drift ±")


def test_one_run_a_side_is_never_narrower_than_its_steps() -> None:
    drift = Drift(ss=1e-12, df=20, runs=21)  # runs that landed almost exactly together
    steps_a, steps_b = [90.0, 110.0, 95.0, 105.0], [100.0, 120.0, 105.0, 115.0]
    c = compare_runs([100.0], [110.0], drift, steps_a=steps_a, steps_b=steps_b)
    se2 = sum(np.var(s, ddof=1) / len(s) / np.mean(s) ** 2 for s in (steps_a, steps_b))
    half = stats.t.ppf(0.975, 20) * math.sqrt(se2)
    assert c.ci_high_pct == pytest.approx((math.exp(math.log(1.1) + half) - 1) * 100)


def test_several_runs_a_side_use_their_own_spread() -> None:
    a, b = [100.0, 104.0, 97.0], [110.0, 113.0, 108.0]
    c = compare_runs(a, b)
    la, lb = np.log(a), np.log(b)
    var = (((la - la.mean()) ** 2).sum() + ((lb - lb.mean()) ** 2).sum()) / 4
    half = stats.t.ppf(0.975, 4) * math.sqrt(var * (1 / 3 + 1 / 3))
    d = lb.mean() - la.mean()
    assert c.basis == RUNS and (c.baseline_runs, c.treatment_runs) == (3, 3)
    assert c.ci_low_pct == pytest.approx((math.exp(d - half) - 1) * 100)
    assert c.ci_low_pct > 0  # a 10 % slowdown over runs 3 % apart


def test_the_basis_of_sides_of_unequal_runs_reads_in_the_singular() -> None:
    """Three runs against one read `3 and 1 runs`: each side is counted with its own noun."""
    c = compare_runs([100.0, 104.0, 97.0], [110.0])
    assert c.basis == RUNS and (c.baseline_runs, c.treatment_runs) == (3, 1)
    # the side of one run adds no spread to the drift: 3 runs
    assert basis_words(c) == f"3 runs and 1 run, drift ±{c.drift_pct:.1f}% (3 runs)"
    assert basis_words(compare_runs([110.0], [100.0, 104.0])).startswith("1 run and 2 runs, drift ±")


def steps(runs: dict[str, list[tuple[int, int]]]) -> pd.DataFrame:
    """run -> [(forward, backward) ns per step] as a steps frame."""
    rows = [
        (run, i, phase, ns)
        for run, per in runs.items()
        for i, pair in enumerate(per)
        for phase, ns in zip(("forward", "backward"), pair, strict=True)
    ]
    return pd.DataFrame(rows, columns=["run", "step", "phase", "duration_ns"])


def test_run_means_add_the_phases_of_whole_steps() -> None:
    means = run_means(steps({"r1": [(10, 20), (12, 22)], "r2": [(11, 21)]}))
    got = {(r, p): m for r, p, m in means[["run", "phase", "mean_ns"]].itertuples(index=False)}
    assert got[("r1", STEP_SUM)] == 32 and got[("r2", STEP_SUM)] == 32
    assert got[("r1", "forward")] == 11


def test_drifts_are_per_phase_over_groups() -> None:
    frame = pd.concat(
        [
            steps({"a1": [(100, 200)], "a2": [(110, 200)]}).assign(group="g1"),
            steps({"b1": [(300, 400)], "b2": [(300, 440)]}).assign(group="g2"),
        ]
    )
    d = drifts(frame)
    assert d["forward"].df == 2 and d["forward"].ss == pytest.approx(2 * (math.log(110 / 100) / 2) ** 2)
    assert d["backward"].ss == pytest.approx(2 * (math.log(440 / 400) / 2) ** 2)


def test_phase_verdicts_without_a_drift_measured_leave_every_phase_unjudged() -> None:
    a = steps({"a": [(100, 200), (101, 201)]})
    b = steps({"b": [(150, 300), (151, 301)]})
    verdicts = phase_verdicts(a, b, drift={})
    assert [v.phase for v in verdicts] == ["forward", "backward", STEP_SUM]
    assert len(unjudged(verdicts)) == 3
    assert {v.verdict for v in verdicts} == {"inconclusive"}


@pytest.mark.slow
def test_run_repeats_stores_the_runs_as_one_experiment_and_prints_their_drift(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/r.sqlite"
    args = ["run", "char", "--device", "cpu", "--repeats", "3", "--steps", "2", "--warmup", "1", "--db", db]
    r = CliRunner().invoke(app, [*args, "--format", "json"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    runs = ResultsStore(db).runs()
    assert len(runs) == 3 and runs["experiment"].nunique() == 1
    assert runs["experiment"].iloc[0].startswith("repeats-")
    (drift,) = [v for k, v in json.loads(r.stdout).items() if k.startswith("drift between runs")]
    whole = {row["Phase"]: row for row in drift}["step (sum)"]
    assert (whole["Runs"], whole["DoF"]) == (3, 2)
    run = ResultsStore(db).get(runs["run_id"].iloc[0])
    stored = stored_drift(ResultsStore(db), [key_of(run.config, run.device_name)])
    assert stored[STEP_SUM].runs == 3


def test_run_repeats_progress_counts_the_runs_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.core.records import RunResult, StepRecord
    from harness.experiments import drift as repeats

    made: list[str] = []

    def run(config):  # a run of the configuration, as a fresh process would end it
        made.append(f"r-{len(made)}")
        steps = [StepRecord(0, False, {"forward": 100 + len(made), "backward": 200, "optimizer": 50})]
        return RunResult(made[-1], config, "ok", device="cpu", device_name="cpu", steps=steps), None

    monkeypatch.setattr(repeats, "run_baseline", run)
    args = ["run", "char", "--device", "cpu", "--repeats", "3", "--steps", "1", "--warmup", "0"]
    r = CliRunner().invoke(app, [*args, "--db", f"sqlite:///{tmp_path}/r.sqlite"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert made == ["r-0", "r-1", "r-2"]
    assert "run 2/3 (fresh process): 1/3 runs" in r.output
    assert "run 3/3 (fresh process): 2/3 runs" in r.output


def test_run_repeats_names_each_run_it_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`run --repeats N` printed no run ids, where `run` does: the runs `show` and `diff` take were not to
    be found from its output. Each row of its table names its run, in the table, csv and json."""
    from harness.core.records import RunResult, StepRecord
    from harness.experiments import drift as repeats

    made: list[str] = []

    def run(config):
        made.append(f"char-{len(made)}")
        steps = [StepRecord(0, False, {"forward": 100 + len(made), "backward": 200, "optimizer": 50})]
        return RunResult(made[-1], config, "ok", device="cpu", device_name="cpu", steps=steps), None

    monkeypatch.setattr(repeats, "run_baseline", run)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    args = ["run", "char", "--device", "cpu", "--repeats", "2", "--steps", "1", "--warmup", "0", "--db", db]
    r = CliRunner().invoke(app, [*args, "--format", "json"])
    assert r.exit_code == 0, r.output
    (table,) = [v for k, v in json.loads(r.stdout).items() if k.startswith("repeats-")]
    assert [row["run"] for row in table] == made == list(ResultsStore(db).runs()["run_id"])
    r = CliRunner().invoke(app, [*args, "--format", "csv"])
    assert r.exit_code == 0, r.output
    assert [line.split(",")[-2] for line in r.stdout.splitlines()[2:4]] == made[2:]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    shown = [line.split("│") for line in r.stdout.splitlines() if line.startswith("│ char")]
    assert [next(c.strip() for c in cells if c.strip().startswith("char-")) for cells in shown] == made[4:]


def test_run_repeats_of_generate_shows_each_runs_serving_means(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.core.records import RunResult, StepRecord
    from harness.execution.generate import serving_figures
    from harness.experiments import drift as repeats

    made: list[str] = []

    def run(config):  # a generate run of 2 new tokens: prefill 1 ms (+ the run's index µs), tokens 400 µs
        made.append(f"g-{len(made)}")
        prefill = 1_000_000 + 1_000 * len(made)
        steps = [StepRecord(0, False, {"prefill": prefill, "decode": 800_000}, tokens=[400_000, 400_000])]
        result = RunResult(made[-1], config, "ok", device="cpu", device_name="cpu", steps=steps)
        result.extra["serving"] = serving_figures(result, {})
        return result, None

    monkeypatch.setattr(repeats, "run_baseline", run)
    args = ["run", "char", "--mode", "generate", "--new-tokens", "2", "-b", "1", "--device", "cpu",
            "--repeats", "2", "--steps", "1", "--warmup", "0", "--db", f"sqlite:///{tmp_path}/r.sqlite",
            "--format", "json"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    (table,) = [v for k, v in json.loads(r.stdout).items() if k.startswith("repeats-")]
    assert [row["TTFT mean (ns)"] for row in table] == [1_001_000, 1_002_000]
    assert [row["TPOT mean (ns)"] for row in table] == [400_000, 400_000]
    assert [row["decode tokens/s"] for row in table] == [2_500, 2_500]  # batch 1 over 0.4 ms a token


def repeats_whose_second_run_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: str, error: str
) -> tuple[list[str], str, object]:
    """`run char --repeats 3` whose second run ends `status` with `error` (the others ok): the runs made,
    the database, the command's result."""
    from harness.core.records import RunResult, StepRecord
    from harness.experiments import drift as repeats

    made: list[str] = []

    def run(config):
        made.append(f"r-{len(made)}")
        if len(made) == 2:
            return RunResult(made[-1], config, status, device="cpu", error=error), None
        steps = [StepRecord(0, False, {"forward": 100, "backward": 200, "optimizer": 50})]
        return RunResult(made[-1], config, "ok", device="cpu", device_name="cpu", steps=steps), None

    monkeypatch.setattr(repeats, "run_baseline", run)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    args = ["run", "char", "--device", "cpu", "--repeats", "3", "--steps", "1", "--warmup", "0", "--db", db]
    return made, db, CliRunner().invoke(app, args, env={"COLUMNS": "200"})


def test_run_repeats_stopped_by_ctrl_c_keeps_the_runs_done_and_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the second run is stopped by Ctrl-C, as its fresh process ends it
    error = "interrupted by SIGINT after 0 of 1 measured steps"
    made, db, r = repeats_whose_second_run_ends(tmp_path, monkeypatch, "interrupted", error)
    assert r.exit_code == 130, r.output  # as a Ctrl-C'd `run`: a script tells it from a failed run
    assert made == ["r-0", "r-1"]
    assert "run r-1 interrupted by SIGINT after 0 of 1 measured steps; stored as interrupted" in r.output
    assert list(ResultsStore(db).runs()["status"]) == ["ok", "interrupted"]


def test_run_repeats_progress_does_not_count_a_run_ctrl_c_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every count said as it changes: the run stopped by Ctrl-C is stored, but it is not a run done
    monkeypatch.setattr(run_cli, "Progress", functools.partial(Progress, every_s=0.0))
    error = "interrupted by SIGINT after 0 of 1 measured steps"
    made, _, r = repeats_whose_second_run_ends(tmp_path, monkeypatch, "interrupted", error)
    assert r.exit_code == 130, r.output
    assert made == ["r-0", "r-1"]
    assert "run 2/3 (fresh process): 1/3 runs" in r.output
    assert "2/3 runs" not in r.output


@pytest.mark.parametrize(("status", "said"), [("error", "RuntimeError: boom"), ("oom", "CUDA out of memory")])
def test_run_repeats_ended_by_a_failed_or_out_of_memory_run_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: str, said: str
) -> None:
    # the second run ends `status`: the repeats stop there, short of the N asked
    made, db, r = repeats_whose_second_run_ends(tmp_path, monkeypatch, status, said)
    assert r.exit_code == 1, r.output
    assert made == ["r-0", "r-1"]
    assert f"run r-1 ended {status}: {said}; the repeats stopped there" in r.output
    assert list(ResultsStore(db).runs()["status"]) == ["ok", status]
    # one run ended ok: no drift is measured, and no row says so with "0 runs"
    assert "fewer than two runs ended ok: no drift measured" in " ".join(r.output.split())
    assert "step (sum)" not in r.output.split("drift between runs", 1)[1]


def test_stored_drift_keeps_apart_generate_runs_of_other_new_tokens_or_cuda_graphs(tmp_path: Path) -> None:
    from harness.core.records import RunConfig, RunResult, StepRecord

    store = ResultsStore(f"sqlite:///{tmp_path}/d.sqlite")
    made = {  # experiment -> (its configuration's settings, each run's decode time)
        "e-eager-4": ({"new_tokens": 4}, [100, 110]),
        "e-eager-16": ({"new_tokens": 16}, [400, 200]),
        "e-graphs-4": ({"new_tokens": 4, "cuda_graphs": True}, [50, 100]),
    }
    for experiment, (settings, decode) in made.items():
        config = RunConfig("tiny", mode="generate", batch_size=1, **settings)
        for i, ns in enumerate(decode):
            steps = [StepRecord(0, False, {"prefill": 1000, "decode": ns})]
            run = RunResult(f"{experiment}-{i}", config, "ok", device="cuda", device_name="H100", steps=steps)
            save_run(store, run, experiment=experiment)
    eager_4 = key_of(RunConfig("tiny", mode="generate", batch_size=1, new_tokens=4).to_dict(), "H100")
    drift = stored_drift(store, [eager_4])
    assert drift["decode"].runs == 2 and drift["decode"].df == 1
    assert drift["decode"].ss == pytest.approx(2 * (math.log(110 / 100) / 2) ** 2)
    # a train run reads neither setting: they do not part its runs
    train = [RunConfig("tiny", new_tokens=n).to_dict() for n in (4, 16)]
    assert key_of(train[0], "H100") == key_of(train[1], "H100")


def test_the_means_shown_beside_an_effect_are_the_ones_it_compares() -> None:
    """Over several runs a side the effect is of geometric means, and `diff` printed arithmetic ones beside
    it: runs of 1 and 3 ms against two of 2.2 ms showed means 2.000 and 2.200 ms (+10%) beside Δ +27.0%.
    The means are now the levels the effect compares: B's over A's is the effect."""
    c = compare_runs([1e6, 3e6], [2.2e6, 2.2e6])
    assert c.baseline_mean == pytest.approx(math.sqrt(3) * 1e6)
    assert c.treatment_mean == pytest.approx(2.2e6)
    assert c.effect_pct == pytest.approx((c.treatment_mean / c.baseline_mean - 1) * 100)
    assert c.effect_pct == pytest.approx(27.0171, abs=1e-3)
    one = compare_runs([1_000_003.0], [999_999.0])  # one run a side: its mean, as measured
    assert (one.baseline_mean, one.treatment_mean) == (1_000_003.0, 999_999.0)


def test_no_drift_names_what_a_generate_run_decodes(tmp_path: Path) -> None:
    """Repeats of tiny generate batch 1 decoding 3 tokens measure no drift for runs decoding 4 (the key
    holds the new tokens); diff said "no drift between runs measured for tiny generate fp32 batch 1", as if
    none of batch 1 were stored, and sent the user to measure what was measured. It names the prompt and
    the new tokens, and the decode path where it is not eager."""
    from harness.core.records import RunConfig, RunResult, StepRecord

    db = f"sqlite:///{tmp_path}/d.sqlite"
    store = ResultsStore(db)

    def save(run_id: str, new_tokens: int, experiment: str | None = None, **settings: object) -> None:
        config = RunConfig("tiny", mode="generate", batch_size=1, context_length=8, new_tokens=new_tokens,
                           warmup=0, steps=2, **settings)  # fmt: skip
        steps = [
            StepRecord(
                i, False, {"prefill": 1000 + i, "decode": 300 + i}, tokens=[100, 100, 100][: new_tokens - 1]
            )
            for i in range(2)
        ]
        run = RunResult(run_id, config, "ok", device="cuda", device_name="H100", steps=steps)
        save_run(store, run, experiment=experiment)

    for i in range(3):
        save(f"rep-{i}", 3, experiment="repeats-1")
    save("a", 4)
    save("b", 4)
    save("g", 4, cuda_graphs=True)

    def note(b: str) -> str:
        shown = CliRunner().invoke(app, ["diff", "a", b, "--db", db, "--format", "json"])
        assert shown.exit_code == 0, shown.output
        (said,) = [n for n in json.loads(shown.stdout)["notes"] if "no drift between runs measured" in n]
        return said

    eager = "tiny generate fp32 batch 1 (prompt 8 + 4 new tokens) on H100"
    assert f"measured for {eager}: a difference" in note("b")
    graphs = "tiny generate fp32 batch 1 (prompt 8 + 4 new tokens, CUDA graphs) on H100"
    assert f"measured for {eager}, {graphs}: a difference" in note("g")


def test_two_runs_of_one_run_repeats_are_diffed_against_the_drift_it_measured(tmp_path: Path) -> None:
    """`diff A B` of two runs of one `run --repeats 3` said "no drift measured" although that experiment
    measured it: the runs compared were left out of the drift, and the one left measured none. Where leaving
    them out leaves none, the experiment's own drift judges them (them among its runs), as it printed it."""
    from harness.core.records import RunConfig, RunResult, StepRecord
    from harness.experiments import diff as hd
    from harness.experiments.drift import measured

    db = f"sqlite:///{tmp_path}/d.sqlite"
    store = ResultsStore(db)
    config = RunConfig("char", device="cpu", warmup=0, steps=2)
    results = []
    for i, forward in enumerate((100_000, 104_000, 97_000)):
        steps = [StepRecord(s, False, {"forward": forward + s, "backward": 2 * forward, "optimizer": 50_000})
                 for s in range(2)]  # fmt: skip
        results.append(RunResult(f"rep-{i}", config, "ok", device="cpu", device_name="cpu", steps=steps))
        save_run(store, results[-1], experiment="repeats-1")
    printed = measured(results)  # what `run --repeats 3` printed
    found = hd.diff(hd.resolve("rep-0", lambda: store), hd.resolve("rep-1", lambda: store), store=store)
    whole = next(v for v in found.verdicts or [] if v.phase == STEP_SUM).comparison
    assert whole.basis == DRIFT and whole.drift_runs == 3
    assert whole.drift_pct == pytest.approx(printed[STEP_SUM].pct)
    shown = CliRunner().invoke(app, ["diff", "rep-0", "rep-1", "--db", db, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    (said,) = [n for n in json.loads(shown.stdout)["notes"] if "drift between runs" in n]
    assert f"(±{printed[STEP_SUM].pct:.1f}% a run's step, 3 runs made together, A and B among them;" in said
    # a run each of two experiments of two runs: each other run is a group of one, and the two compared were
    # not made together: no drift measured, none made up for them
    apart = ResultsStore(f"sqlite:///{tmp_path}/apart.sqlite")
    for i, r in enumerate(results[:2] * 2):
        run = RunResult(f"e{i // 2}-{i % 2}", config, "ok", device="cpu", device_name="cpu", steps=r.steps)
        save_run(apart, run, experiment=f"repeats-{i // 2}")
    two = hd.diff(hd.resolve("e0-0", lambda: apart), hd.resolve("e1-0", lambda: apart), store=apart)
    assert {v.comparison.basis for v in two.verdicts or []} == {NO_DRIFT}


def test_several_runs_a_side_of_one_experiment_are_not_counted_again_as_its_drift(tmp_path: Path) -> None:
    """`diff A1,A2 B1,B2` of four runs of one `run --repeats 4`, with no other run of the configuration: the
    sides' own spread is pooled by the comparison, so the experiment's drift (the same four runs) is not
    added to it: four runs' spread counted twice made the interval narrower than they measure."""
    from harness.core.records import RunConfig, RunResult, StepRecord
    from harness.experiments import diff as hd
    from harness.experiments.drift import measured

    store = ResultsStore(f"sqlite:///{tmp_path}/d.sqlite")
    config = RunConfig("char", device="cpu", warmup=0, steps=2)
    results = []
    for i, forward in enumerate((100_000, 104_000, 97_000, 101_000)):
        steps = [StepRecord(s, False, {"forward": forward + s, "backward": 2 * forward, "optimizer": 50_000})
                 for s in range(2)]  # fmt: skip
        results.append(RunResult(f"rep-{i}", config, "ok", device="cpu", device_name="cpu", steps=steps))
        save_run(store, results[-1], experiment="repeats-1")
    found = hd.diff(
        hd.resolve("rep-0,rep-1", lambda: store), hd.resolve("rep-2,rep-3", lambda: store), store=store
    )
    assert not found.drift_of_sides and found.drift == {}
    whole = next(v for v in found.verdicts or [] if v.phase == STEP_SUM).comparison
    sides = measured(results[:2]), measured(results[2:])  # each side's own spread, one df each
    pooled = sides[0][STEP_SUM] + sides[1][STEP_SUM]
    assert (whole.basis, whole.drift_runs, whole.drift_pct) == (RUNS, 4, pytest.approx(pooled.pct))


@pytest.mark.parametrize("others", [0.8, 0.01])
def test_run_repeats_on_a_busy_machine_warns_as_overhead_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, others: float
) -> None:
    """`run --repeats N` measures the drift that diff later judges runs of the configuration by; on a busy
    machine it printed the load in a note only, where overhead warns. Quiet: no warning."""
    from harness.core.machine import MachineLoad
    from harness.core.records import RunResult, StepRecord
    from harness.experiments import drift as repeats

    load = MachineLoad(
        cpus=2, seconds=10.0, load_before=0.1, load_after=0.2, others_share=others, own_share=0.5
    )

    made: list[str] = []

    def run(config):  # type: ignore[no-untyped-def]
        made.append(f"r-{len(made)}")
        steps = [StepRecord(0, False, {"forward": 100, "backward": 200, "optimizer": 50})]
        result = RunResult(made[-1], config, "ok", device="cpu", device_name="cpu", steps=steps)
        result.extra["machine"] = load.to_dict()
        return result, None

    monkeypatch.setattr(repeats, "run_baseline", run)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    args = ["run", "char", "--device", "cpu", "--repeats", "2", "--steps", "1", "--warmup", "0", "--db", db]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    warned = [line for line in r.stderr.splitlines() if line.startswith("warning: the machine was busy")]
    assert warned == (
        [
            "warning: the machine was busy during the repeats (other processes took 80% of the CPU time): "
            "timings are noisier than usual, and so is the drift between runs measured from them"
        ]
        if others > 0.1
        else []
    )
