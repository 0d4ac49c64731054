"""`harness optimize`: proposals from findings, changes measured against the configuration before them in
alternating runs, verdicts, stacking, the budget, every run stored as one optimisation, its waterfall.

The runs are made by a function of the configuration (`Machine`): each configuration's step time is a
figure it is given (a fix makes it faster, slower or leaves it), with a few tenths of a percent of seeded
noise per run; the captures' findings are those of the configuration (a fix removes its cause's rule).
What optimize does with them is the code under test; `harness optimize tiny --device cpu` itself runs in
the slow test at the end.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_diff import CPU_TRAIN
from typer.testing import CliRunner

from analysis.dashboard.optimize import optimize_panel, steps_of
from analysis.dashboard.panel import DashboardData
from harness.cli import app
from harness.core.errors import HarnessError
from harness.core.records import RunConfig, RunResult, StepRecord, new_id
from harness.experiments import optimize as opt
from harness.experiments.proposals import proposal_table
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()
BASE_NS = 10_000_000


class Machine:
    """Runs of a configuration: step time BASE_NS × the product of `effects[fix]` over its fixes; tokens
    per step batch × context; the findings of a capture: `rules` less those its fixes remove (`removes`)."""

    def __init__(
        self, effects: dict[str, float], rules: list[str], removes: dict[str, str], noise: float = 0.002
    ) -> None:
        self.effects, self.rules, self.removes = effects, rules, removes
        self.rng = np.random.default_rng(7)
        self.noise = noise
        self.timed_runs: list[RunConfig] = []
        self.captures: list[RunConfig] = []

    def step_ns(self, config: RunConfig) -> float:
        return BASE_NS * math.prod(self.effects.get(f, 1.0) for f in config.fixes)

    def timed(self, config: RunConfig) -> RunResult:
        self.timed_runs.append(config)
        level = self.step_ns(config) * (1 + self.noise * self.rng.standard_normal())
        steps = [
            StepRecord(i, i < config.warmup, {"forward": int(level * 0.4 * (1 + 0.01 * self.rng.normal())),
                                             "backward": int(level * 0.6)})
            for i in range(config.warmup + config.steps)
        ]  # fmt: skip
        measured = [sum(s.phases.values()) for s in steps if not s.warmup]
        tokens = config.batch_size * 64
        return RunResult(
            new_id(config.model), config, "ok", device="cpu", device_name="test cpu", steps=steps,
            tokens_per_s=tokens / (sum(measured) / len(measured) / 1e9),
        )  # fmt: skip

    def capture(self, config: RunConfig) -> tuple[RunResult, dict[str, Any], list[str]]:
        self.captures.append(config)
        result = self.timed(config)
        self.timed_runs.pop()
        gone = {self.removes[f] for f in config.fixes if f in self.removes}
        found = [
            {"rule": r, "at_stake_ns": 1_000_000 * (len(self.rules) - i), "evidence": f"{r} seen"}
            for i, r in enumerate(self.rules)
            if r not in gone
        ]
        return result, {"profiler": "nsys", "advice": {"health": {}, "findings": found}}, []


def config(**kw: Any) -> RunConfig:
    return RunConfig(model="tiny", device="cpu", warmup=1, steps=3, **kw)


def run(machine: Machine, cfg: RunConfig, store: ResultsStore, **kw: Any) -> opt.Optimisation:
    kw.setdefault("budget", None)
    return opt.optimize(cfg, store, capture=machine.capture, timed=machine.timed, **kw)


def test_a_faster_change_is_kept_a_slower_one_is_not_and_the_kept_ones_stack(tmp_db: str) -> None:
    machine = Machine(
        {"loader-workers": 0.6, "larger-batch": 1.5, "compile": 0.8},
        ["data-loader", "launch-bound"],
        {"loader-workers": "data-loader"},
    )
    store = ResultsStore(tmp_db)
    done = run(machine, config(plant="slow-loader"), store, repeats=3)
    by_fix = {t.fix: t for t in done.tried}
    assert list(by_fix) == ["loader-workers", "larger-batch"]  # compile: not tried on a CPU
    workers, batch = by_fix["loader-workers"], by_fix["larger-batch"]
    assert (workers.verdict, workers.gone) == (opt.FASTER, True)
    assert workers.step is not None and workers.step.effect_pct == pytest.approx(-40, abs=1.5)
    assert workers.step.ci_high_pct < 0
    # a larger batch: each step 1.5 times longer for twice the tokens, so per token faster (0.75)
    assert batch.verdict == opt.FASTER
    assert batch.base.fixes == ["loader-workers"]  # tried on top of the kept change
    assert batch.per_token is not None and batch.per_token.effect_pct == pytest.approx(-25, abs=1.5)
    assert done.final.fixes == ["loader-workers", "larger-batch"]
    assert done.final.loader_workers == 2 and done.final.batch_size == 8
    assert done.final_check is not None and done.final_check.verdict == opt.FASTER
    assert len(workers.runs) == len(batch.runs) == 3
    table = opt.verdict_table(done)
    assert list(table["Change"]) == [
        "baseline", "loader-workers", "larger-batch", "final: loader-workers + larger-batch"
    ]  # fmt: skip
    assert list(table["Verdict"])[1:] == [opt.FASTER] * 3
    assert list(table["Finding gone"])[1:3] == ["yes", "no"]
    assert list(table["Next"])[:3] == ["loader-workers", "larger-batch", "—"]


def test_a_change_that_makes_no_difference_is_said_so_and_not_kept(tmp_db: str) -> None:
    machine = Machine({"fused-adamw": 1.0}, ["optimizer-loop"], {})
    done = run(machine, config(plant="optimizer-loop"), ResultsStore(tmp_db), repeats=3)
    (t,) = done.tried
    assert t.fix == "fused-adamw" and t.verdict == opt.SAME and t.gone is False
    assert t.per_token is not None and t.per_token.ci_low_pct < 0 < t.per_token.ci_high_pct
    assert done.final.fixes == [] and done.final.optimizer == "loop"


def test_a_change_whose_interval_is_wide_is_inconclusive_not_no_difference(tmp_db: str) -> None:
    """Runs 30% apart from one another (a busy machine), two rounds: the interval of the change spans tens of
    percent either side of zero. "no difference" said a change of -20% or +20% was ruled out; it is
    inconclusive, with its interval, and not kept."""
    machine = Machine({"fused-adamw": 1.0}, ["optimizer-loop"], {}, noise=0.3)
    done = run(machine, config(plant="optimizer-loop"), ResultsStore(tmp_db), repeats=2)
    (t,) = done.tried
    c = t.per_token
    assert c is not None and c.ci_low_pct < -5 and c.ci_high_pct > 5
    assert t.verdict == (
        f"inconclusive (CI {c.ci_low_pct:+.1f}…{c.ci_high_pct:+.1f}%): more rounds (--repeats, --ci-target) "
        "could tell"
    )
    assert done.final.fixes == [] and not done.accepted
    assert list(opt.verdict_table(done)["Verdict"])[1] == t.verdict


def test_the_table_shows_the_interval_the_verdict_is_judged_on(tmp_db: str) -> None:
    """A larger batch over launch-bound's batch 1: each step 1.5 times longer, each token cheaper. The table's
    only interval was the step's (above zero) beside the verdict `faster` (judged on time per token): a
    reader checking the verdict against the table found it contradicted. Both intervals are there, named."""
    machine = Machine({"larger-batch": 1.5}, ["launch-bound"], {"larger-batch": "launch-bound"})
    done = run(machine, config(plant="launch-bound"), ResultsStore(tmp_db), repeats=3)
    (t,) = done.tried
    assert t.per_token is not None and t.step is not None
    row = opt.verdict_table(done).set_index("Change").loc["larger-batch"]
    assert row["Verdict"] == opt.FASTER
    assert row["Step CI low (%)"] == t.step.ci_low_pct > 0  # each step longer
    assert (row["Δ time/token (%)"], row["Time/token CI low (%)"], row["Time/token CI high (%)"]) == (
        t.per_token.effect_pct,
        t.per_token.ci_low_pct,
        t.per_token.ci_high_pct,
    )
    assert row["Time/token CI high (%)"] < 0  # the verdict's rule, on the table's own figures


def test_a_ci_target_keeps_at_least_the_rounds_repeats_asks(tmp_db: str) -> None:
    """`--repeats 12 --ci-target 0.001` (an interval it never reaches): its rounds stopped at 10, fewer than
    the --repeats the help says it runs at least."""
    machine = Machine({"fused-adamw": 1.0}, ["optimizer-loop"], {})
    done = run(machine, config(plant="optimizer-loop"), ResultsStore(tmp_db), repeats=12, ci_target=0.001)
    (t,) = done.tried
    assert len(t.runs) == 12 and len(machine.timed_runs) == 24


def test_the_baseline_rows_step_is_the_first_changes_step_before(tmp_db: str) -> None:
    """The same runs' step time in two rows of one table: the baseline's was their arithmetic mean, the first
    change's `Step before` their geometric mean (the drift's level), 2.4 % apart on runs 30 % apart."""
    machine = Machine({"fused-adamw": 1.0}, ["optimizer-loop"], {}, noise=0.3)
    done = run(machine, config(plant="optimizer-loop"), ResultsStore(tmp_db), repeats=3)
    table = opt.verdict_table(done).set_index("Change")
    assert table.loc["baseline", "Step before (ns)"] == pytest.approx(
        table.loc["fused-adamw", "Step before (ns)"], rel=1e-12
    )


def test_a_slower_change_is_called_slower(tmp_db: str) -> None:
    machine = Machine({"sdpa": 1.3}, ["math-attention"], {"sdpa": "math-attention"})
    done = run(machine, config(plant="math-attention"), ResultsStore(tmp_db), repeats=3)
    (t,) = done.tried
    assert t.verdict == opt.SLOWER and t.gone is True
    assert done.final.fixes == []


def test_every_run_is_stored_as_one_optimisation_and_the_dashboard_draws_its_waterfall(tmp_db: str) -> None:
    machine = Machine({"loader-workers": 0.6, "larger-batch": 1.1}, ["data-loader", "launch-bound"],
                      {"loader-workers": "data-loader"})  # fmt: skip
    store = ResultsStore(tmp_db)
    done = run(machine, config(plant="slow-loader"), store, repeats=2)
    runs = store.runs(experiment=done.experiment)
    assert len(runs) == len(machine.timed_runs) + len(machine.captures)
    roles = runs["optimize"].map(lambda p: p["role"]).value_counts().to_dict()
    assert roles == {"timed": len(machine.timed_runs), "capture": len(machine.captures)}
    changes = steps_of_runs(store, done.experiment)
    assert [(c, v) for c, _, _, v in changes] == [
        ("loader-workers", opt.FASTER),
        ("larger-batch", opt.FASTER),
    ]
    workers = changes[0]
    assert workers[2] / workers[1] == pytest.approx(1 / 0.6, rel=0.02)
    panel = optimize_panel(DashboardData(runs=store.runs()))
    assert panel.figure is not None and panel.missing is None
    (trace,) = panel.figure.data
    assert list(trace.x) == ["baseline", "loader-workers", "larger-batch", "final"]


def steps_of_runs(store: ResultsStore, experiment: str) -> list[tuple[str, float, float, str]]:
    from analysis.dashboard.optimize import newest_optimisation

    return steps_of(newest_optimisation(store.runs(experiment=experiment)))


def test_the_budget_stops_the_runs_and_says_what_was_not_run(tmp_db: str) -> None:
    machine = Machine({"loader-workers": 0.6}, ["data-loader"], {})
    done = run(machine, config(plant="slow-loader"), ResultsStore(tmp_db), repeats=3, budget=1e-9)
    assert machine.timed_runs == []  # only the baseline's capture ran
    (t,) = done.tried
    assert t.verdict == opt.NOT_RUN and t.why == "the budget"
    assert (
        opt.verdict_table(done)["Verdict"].iloc[1] == "not run: the budget"
    )  # said once, not "not run: not run"


def test_a_stop_before_the_stack_is_checked_shows_no_single_changes_figures_as_the_final(tmp_db: str) -> None:
    """Two changes kept, then Ctrl-C in the second's capture: no final check ran, and the row `final:
    loader-workers + larger-batch` showed loader-workers' own figures and verdict (+66.7 % tokens/s, faster)
    as the stack's."""

    class StopsSecondCapture(Machine):
        def capture(self, config: RunConfig) -> tuple[RunResult, dict[str, Any], list[str]]:
            result, how, notes = super().capture(config)
            if len(config.fixes) == 2:
                result.status, result.error = (
                    "interrupted",
                    "interrupted by SIGINT after 1 of 3 measured steps",
                )
                return result, {"profiler": "nsys"}, notes
            return result, how, notes

    effects = {"loader-workers": 0.6, "larger-batch": 0.7}
    machine = StopsSecondCapture(effects, ["data-loader", "launch-bound"], {})
    done = run(machine, config(plant="slow-loader"), ResultsStore(tmp_db), repeats=2)
    assert done.interrupted == 2 and [t.fix for t in done.accepted] == ["loader-workers", "larger-batch"]
    assert done.final_check is None
    final = opt.verdict_table(done).iloc[-1]
    assert final["Change"] == "final: loader-workers + larger-batch"
    assert final["Verdict"] == opt.UNCHECKED
    assert math.isnan(final["Δ tokens/s (%)"]) and final["Rounds"] == 0


def test_a_change_the_budget_left_uncaptured_says_why_its_finding_gone_is_unknown(
    tmp_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change measured, then no room in the budget for its capture: "Finding gone" was "—", unexplained."""
    machine = Machine({"loader-workers": 0.6}, ["data-loader"], {"loader-workers": "data-loader"})
    real = opt.Clock.fits
    monkeypatch.setattr(opt.Clock, "fits", lambda self, *kinds: kinds != ("capture",) and real(self, *kinds))
    done = run(machine, config(plant="slow-loader"), ResultsStore(tmp_db), repeats=2)
    (t,) = done.tried
    assert t.verdict == opt.FASTER and t.gone is None and len(machine.captures) == 1
    assert (
        "loader-workers was not captured (the budget): whether its finding is gone is not known" in done.notes
    )


def test_an_optimisation_with_its_capture_alone_is_not_said_missing(tmp_db: str) -> None:
    """A budget that leaves only the baseline's capture: optimize's note said the dashboard draws its
    waterfall, and the dashboard said no optimisation was stored, with a command to make one."""
    store = ResultsStore(tmp_db)
    done = run(Machine({}, [], {}), config(), store, repeats=2, budget=1e-9)
    panel = optimize_panel(DashboardData(runs=store.runs()))
    assert panel.figure is None
    assert panel.missing == (
        f"{done.experiment}: no run of it was timed (its --budget or a stop left only the baseline's capture)"
    )


def test_no_finding_times_the_baseline_alone(tmp_db: str) -> None:
    machine = Machine({}, [], {})
    done = run(machine, config(), ResultsStore(tmp_db), repeats=2)
    assert done.tried == [] and len(done.baseline_runs) == 2
    table = opt.verdict_table(done)
    assert list(table["Change"]) == ["baseline", "final: no change kept"]
    assert table["Tokens/s before"].iloc[0] == pytest.approx(4 * 64 / (BASE_NS / 1e9), rel=0.02)
    assert done.baseline_drift is None  # nothing stored before: its interval from its own two runs
    again = run(machine, config(), ResultsStore(tmp_db), repeats=2)
    assert again.baseline_drift is not None and again.baseline_drift.runs == 2  # the first one's runs
    low, high = (opt.verdict_table(again)[c].iloc[0] for c in ("Tokens/s before low", "Tokens/s before high"))
    first = opt.verdict_table(done)
    assert high - low < first["Tokens/s before high"].iloc[0] - first["Tokens/s before low"].iloc[0]


def test_one_round_is_judged_against_the_optimisations_own_drift_where_the_others_measure_none(
    tmp_db: str,
) -> None:
    """One round a change: the runs compared were left out of the drift (stored_drift, exclude), and the one
    other run of the baseline left measured none, so the second change, tried against the baseline again,
    got "no verdict". As diff judges two runs of one experiment, the optimisation's own drift judges them
    where the others measure none: the baseline's two runs (the first change's round and this one's)."""
    from analysis.compare.drift import DRIFT

    machine = Machine({"loader-workers": 1.3, "larger-batch": 1.0}, ["data-loader", "launch-bound"],
                      {"loader-workers": "data-loader"})  # fmt: skip
    store = ResultsStore(tmp_db)
    done = run(machine, config(plant="slow-loader"), store, repeats=1)
    workers, batch = done.tried
    assert (workers.fix, workers.verdict) == ("loader-workers", opt.NO_VERDICT)  # one run of each: none
    assert batch.fix == "larger-batch" and batch.base.fixes == []  # against the baseline again
    assert batch.per_token is not None and batch.per_token.basis == DRIFT and batch.per_token.drift_runs == 2
    assert batch.verdict == opt.FASTER  # each step as long for twice the tokens
    assert done.baseline_drift is not None and (done.baseline_drift.runs, done.baseline_drift.df) == (2, 1)
    table = opt.verdict_table(done)
    assert not math.isnan(table["Tokens/s before low"].iloc[0])  # the baseline's interval, from that drift


def test_a_finding_no_change_answers_is_proposed_with_why() -> None:
    found = [{"rule": "host-gap", "at_stake_ns": 5, "evidence": "gaps"},
             {"rule": "launch-bound", "at_stake_ns": 3, "evidence": "small kernels"}]  # fmt: skip
    props = opt.proposals(config(), found, "cpu")
    assert [(p.rule, p.fix, p.change is not None) for p in props] == [
        ("host-gap", None, False), ("launch-bound", "larger-batch", True), ("launch-bound", "compile", False),
        ("launch-bound", "cuda-graphs", False),
    ]  # fmt: skip
    table = proposal_table(props)
    assert table["Applies"].iloc[2].startswith("no: not tried on the CPU")


def test_optimize_of_an_export_proposes_without_applying(tmp_db: str) -> None:
    r = runner.invoke(app, ["optimize", str(CPU_TRAIN), "--format", "json"], env={"HARNESS_DB": tmp_db})
    assert r.exit_code == 0, r.output
    assert "not applied" in r.output
    assert ResultsStore(tmp_db).runs().empty  # nothing run, nothing stored


def test_optimize_of_a_folder_says_it_is_one(tmp_path: Path) -> None:
    """`optimize nsys_profiles/` said `no such file` of a folder that is there."""
    r = runner.invoke(app, ["optimize", str(tmp_path)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert " ".join(r.stderr.split()) == (
        f"error: {tmp_path} is a folder: pass the .sqlite export, the .nsys-rep report or the .json(.gz) "
        "trace inside it"
    )


def test_optimize_refuses_a_bad_budget_in_one_line(tmp_db: str) -> None:
    r = runner.invoke(app, ["optimize", "tiny", "--device", "cpu", "--budget", "0", "--db", tmp_db])
    assert r.exit_code != 0
    assert "--budget must be a positive number of seconds" in r.output
    assert "Traceback" not in r.output


@pytest.mark.slow
def test_optimize_tiny_on_the_cpu_ends_with_its_table_of_verdicts(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/r.sqlite"
    out = subprocess.run(
        [sys.executable, "-m", "harness", "optimize", "tiny", "--device", "cpu", "--db", db,
         "--format", "json", "--profile-dir", str(tmp_path / "prof")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert '"Verdict"' in out.stdout
    runs = ResultsStore(db).runs()
    assert runs["experiment"].nunique() == 1 and runs["experiment"].iloc[0].startswith("optimize-")


def test_optimize_of_a_stored_run_proposes_its_findings_without_applying(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    result = Machine({}, [], {}).timed(config())
    found = [{"rule": "data-loader", "at_stake_ns": 7_000_000, "evidence": "the loader's range: 7 ms"}]
    save_run(store, result, advice={"health": {}, "findings": found})
    r = runner.invoke(app, ["optimize", result.run_id, "--db", tmp_db, "--format", "json"])
    assert r.exit_code == 0, r.output
    (rows,) = [v for k, v in json.loads(r.stdout).items() if k.startswith("proposals for")]
    assert [(row["Finding"], row["Change"]) for row in rows] == [("data-loader", "loader-workers")]
    assert rows[0]["Applies"].startswith("no: proposed, not applied")
    assert len(store.runs()) == 1  # nothing run
    assert f"run {result.run_id} is the harness's own: `harness optimize tiny --device cpu` tries them" in (
        " ".join(r.stderr.split())
    )
    # its settings and its plant (not the clean model's); optimize's own warm-up and steps, not the run's
    planted = Machine({}, [], {}).timed(
        RunConfig(model="tiny", device="cpu", mode="forward", precision="bf16", batch_size=8, warmup=5,
                  steps=10, plant="slow-loader")
    )  # fmt: skip
    save_run(store, planted, advice={"health": {}, "findings": found})
    r = runner.invoke(app, ["optimize", planted.run_id, "--db", tmp_db, "--format", "json"])
    said = " ".join(r.stderr.split())
    again = "harness optimize tiny --mode forward --device cpu --precision bf16 --batch-size 8"
    again += " --plant slow-loader"
    assert f"`{again}` tries them" in said


def test_optimize_of_a_run_stored_without_its_model_and_mode_offers_its_line(tmp_db: str) -> None:
    """A run's configuration as the store reads it (its checks' reading, ResultsStore.run_configs): one
    stored without its model and mode (read as the run's) and with a field of a newer harness ended in a
    TypeError's traceback; now its line, with the run's mode and plant."""
    store = ResultsStore(tmp_db)
    planted = Machine({}, [], {}).timed(
        RunConfig(model="tiny", device="cpu", mode="forward", batch_size=8, plant="slow-loader")
    )
    found = [{"rule": "data-loader", "at_stake_ns": 7_000_000, "evidence": "the loader's range: 7 ms"}]
    save_run(store, planted, advice={"health": {}, "findings": found})
    with sqlite3.connect(tmp_db.removeprefix("sqlite:///")) as db:
        gone = "json_remove(config, '$.model', '$.mode')"
        db.execute(f"UPDATE runs SET config = json_set({gone}, '$.newer', 1) WHERE id = ?", (planted.run_id,))
    r = runner.invoke(app, ["optimize", planted.run_id, "--db", tmp_db, "--format", "json"])
    assert r.exit_code == 0, r.output
    again = "harness optimize tiny --mode forward --device cpu --batch-size 8 --plant slow-loader"
    assert f"`{again}` tries them" in " ".join(r.stderr.split())


def test_optimize_of_a_fixed_run_offers_a_line_optimize_takes(tmp_db: str, tmp_path: Path) -> None:
    """A run `--plant launch-bound --fix larger-batch -b 8`: its line was `harness optimize tiny --device cpu
    --batch-size 8 --plant launch-bound`, which optimize refuses (the plant sets batch 1, and optimize takes
    no --fix). The line starts from the plant's own settings, and says so."""
    import shlex

    store = ResultsStore(tmp_db)
    fixed = Machine({}, [], {}).timed(config(plant="launch-bound", batch_size=8, fixes=["larger-batch"]))
    found = [{"rule": "launch-bound", "at_stake_ns": 7_000_000, "evidence": "small ops"}]
    save_run(store, fixed, advice={"health": {}, "findings": found})
    r = runner.invoke(app, ["optimize", fixed.run_id, "--db", tmp_db, "--format", "json"])
    assert r.exit_code == 0, r.output
    said = " ".join(r.stderr.split())
    line = re.search(r"`(harness optimize [^`]*)` tries them", said)
    assert line is not None, said
    assert line.group(1) == "harness optimize tiny --device cpu --plant launch-bound"
    assert "tries them (from the plant's own settings: optimize takes no --fix larger-batch)" in said
    bad_db = tmp_path / "file"
    bad_db.write_text("x")  # the line's options checked as optimize checks them; it stops at the --db
    again = runner.invoke(app, [*shlex.split(line.group(1))[1:], "--db", str(bad_db / "r.sqlite")])
    assert again.exit_code == 1 and "--plant launch-bound sets" not in again.output, again.output


def test_optimize_of_a_run_across_ranks_says_its_line_runs_one_process(tmp_db: str) -> None:
    """A run of `--nproc 2`: its line `harness optimize tiny --device cpu --plant slow-loader` left the ranks
    out without a word (optimize takes no --nproc), and said it tries the changes on the run's
    configuration; now the line and each change's Applies say it tries them in one process."""
    store = ResultsStore(tmp_db)
    ranked = Machine({}, [], {}).timed(config(plant="slow-loader", nproc=2))
    found = [{"rule": "data-loader", "at_stake_ns": 7_000_000, "evidence": "the loader's range: 7 ms"}]
    save_run(store, ranked, advice={"health": {}, "findings": found})
    r = runner.invoke(app, ["optimize", ranked.run_id, "--db", tmp_db, "--format", "json"])
    assert r.exit_code == 0, r.output
    (rows,) = [v for k, v in json.loads(r.stdout).items() if k.startswith("proposals for")]
    one = "in one process (optimize runs one; this run ran 2 ranks)"
    assert rows[0]["Applies"].endswith(f"the `harness optimize` line below tries it {one}")
    line = "harness optimize tiny --device cpu --plant slow-loader"
    assert f"`{line}` tries them {one}" in " ".join(r.stderr.split())


def test_optimize_of_a_stored_run_without_findings_says_so_without_an_empty_table(tmp_db: str) -> None:
    """For people the lines alone, naming the run (it printed an empty table of proposals above them); json
    keeps its empty list."""
    store = ResultsStore(tmp_db)
    result = Machine({}, [], {}).timed(config())
    save_run(store, result, advice={"health": {}, "findings": []})
    r = runner.invoke(app, ["optimize", result.run_id, "--db", tmp_db], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    assert f"note: no finding in run {result.run_id} (train): nothing to propose" in " ".join(
        r.stderr.split()
    )
    r = runner.invoke(app, ["optimize", result.run_id, "--db", tmp_db, "--format", "json"])
    assert [v for k, v in json.loads(r.stdout).items() if k.startswith("proposals for")] == [[]]


def test_optimize_of_a_stored_run_offers_no_command_to_try_findings_it_has_not(tmp_db: str) -> None:
    """A run whose capture had no finding is not sent to `harness optimize MODEL` to try "them" (there are
    none); a run never captured is, as the command that captures it first."""
    store = ResultsStore(tmp_db)
    clean = Machine({}, [], {}).timed(config())
    save_run(store, clean, advice={"health": {}, "findings": []})
    said = " ".join(runner.invoke(app, ["optimize", clean.run_id, "--db", tmp_db]).stderr.split())
    assert f"no finding in run {clean.run_id} (train): nothing to propose" in said
    assert "tries them" not in said and "harness optimize tiny" not in said
    bare = Machine({}, [], {}).timed(config())
    save_run(store, bare)
    said = " ".join(runner.invoke(app, ["optimize", bare.run_id, "--db", tmp_db]).stderr.split())
    assert "tries them" not in said
    # never judged: not "no finding in run …", which reads as a capture judged clean
    assert f"no finding in run {bare.run_id}" not in said
    assert f"run {bare.run_id} has no capture, so no rule was run: nothing to propose" in said
    assert f"run {bare.run_id} is the harness's own: `harness optimize tiny --device cpu` captures it" in said


def test_a_misspelt_model_with_run_options_is_said_unknown(tmp_db: str) -> None:
    """`optimize tinyy --device cpu` named only the options as what was wrong (as if tinyy were an export
    or a stored run); it is neither, nor a model: said as without the options, models named."""
    store = ResultsStore(tmp_db)
    stored = Machine({}, [], {}).timed(config())
    save_run(store, stored, advice={"health": {}, "findings": []})
    r = runner.invoke(app, ["optimize", "tinyy", "--device", "cpu", "--steps", "2", "--db", tmp_db])
    assert r.exit_code != 0 and "Traceback" not in r.output
    said = " ".join(r.stderr.split())
    assert said.startswith("error: no run with id 'tinyy'")
    assert "(and it is not one of the models: tiny, small," in said and "--device" not in said
    r = runner.invoke(app, ["optimize", stored.run_id, "--device", "cpu", "--db", tmp_db])
    assert r.exit_code == 2
    assert "error: --device: of an export or a stored run the findings are read" in " ".join(r.stderr.split())


def test_optimize_of_a_harness_run_says_which_changes_apply_to_it(tmp_db: str) -> None:
    """A stored generate run of the harness's own on the CPU: each change said it was not applied because
    "the harness does not run this program (apply it in its code)", beside the note that the harness runs
    it. Each now says whether it applies to the run's configuration, as optimize MODEL would judge it."""
    store = ResultsStore(tmp_db)
    gen = Machine({}, [], {}).timed(RunConfig(model="tiny", device="cpu", mode="generate", new_tokens=4,
                                              warmup=1, steps=2))  # fmt: skip
    found = [
        {"rule": rule, "at_stake_ns": 7_000_000, "evidence": "seen"} for rule in ("host-sync", "launch-bound")
    ]
    save_run(store, gen, advice={"health": {}, "findings": found})
    r = runner.invoke(app, ["optimize", gen.run_id, "--db", tmp_db, "--format", "json"])
    assert r.exit_code == 0, r.output
    (rows,) = [v for k, v in json.loads(r.stdout).items() if k.startswith("proposals for")]
    applies = {row["Change"]: row["Applies"] for row in rows}
    assert applies == {
        "drop-item": "no: proposed, not applied: the step reads no loss on the host",
        "larger-batch": "no: proposed, not applied: the `harness optimize` line below tries it",
        "compile": "no: proposed, not applied: not tried on the CPU: compiling the step takes longer than "
        "the runs it is measured by",
        "cuda-graphs": "no: proposed, not applied: CUDA graphs need a CUDA device",
    }
    assert "`harness optimize tiny --mode generate --device cpu --new-tokens 4` tries them" in " ".join(
        r.stderr.split()
    )


def test_optimize_of_a_torch_profiler_run_judges_its_trace_as_advise_does(
    tmp_db: str, tmp_path: Path
) -> None:
    """A run under --profiler torch is stored without findings (its trace is judged when read): optimize
    RUN said it had none stored, "profile it", and proposed nothing, while `advise RUN` listed the trace's
    findings. It proposes for those findings."""
    from kineto_data import trace_path

    trace = tmp_path / "alexnet.pt.trace.json.gz"
    trace.write_bytes(trace_path("alexnet").read_bytes())
    store = ResultsStore(tmp_db)
    result = Machine({}, [], {}).timed(config())
    save_run(store, result, profiler="torch", artifacts={"trace": str(trace)})
    advised = runner.invoke(app, ["advise", result.run_id, "--db", tmp_db, "--format", "json"])
    assert advised.exit_code == 0, advised.output
    rules = [row["Rule"] for row in next(iter(json.loads(advised.stdout).values()))]
    r = runner.invoke(app, ["optimize", result.run_id, "--db", tmp_db, "--format", "json"])
    assert r.exit_code == 0, r.output
    (rows,) = [v for k, v in json.loads(r.stdout).items() if k.startswith("proposals for")]
    assert list(dict.fromkeys(row["Finding"] for row in rows)) == rules
    assert "fp32-gemm" in rules and "no findings stored" not in r.stderr


def test_optimize_of_a_cpu_torch_profiler_run_does_not_promise_what_nsys_cannot_see(tmp_db: str) -> None:
    """A CPU run under --profiler torch whose host-sync was judged on its operators: its line `harness
    optimize tiny --device cpu --plant host-sync` was said to try the change, but optimize captures under
    nsys, where a CPU capture has no CUDA for host-sync: it finds nothing and tries nothing. Said so; a
    finding nsys sees on the CPU (data-loader) keeps the line that captures it."""
    store = ResultsStore(tmp_db)
    result = Machine({}, [], {}).timed(config(plant="host-sync"))
    found = [
        {"rule": "host-sync", "at_stake_ns": 6_000, "evidence": "3 aten::_local_scalar_dense"},
        {"rule": "data-loader", "at_stake_ns": 5_000, "evidence": "the loader's range"},
    ]
    save_run(store, result, profiler="torch", advice={"health": {}, "findings": found})
    r = runner.invoke(app, ["optimize", result.run_id, "--db", tmp_db, "--format", "json"])
    assert r.exit_code == 0, r.output
    (rows,) = [v for k, v in json.loads(r.stdout).items() if k.startswith("proposals for")]
    applies = {row["Change"]: row["Applies"] for row in rows}
    assert "holds no CUDA for this rule" in applies["drop-item"]
    said = " ".join(r.stderr.split())
    assert f"run {result.run_id}'s host-sync was judged on its torch.profiler operators" in said
    assert "it would not find them, nor try their changes" in said
    assert "--plant host-sync` tries them" in said  # data-loader's


@pytest.mark.slow
def test_a_change_is_measured_in_real_alternating_runs(tmp_db: str) -> None:
    """The slow loader and its workers, each run a fresh process; the capture's finding is given (the CPU
    capture's own rules are docs/advice.md's), so what is under test is the measuring of the change."""

    def capture(cfg: RunConfig) -> tuple[RunResult, dict[str, Any], list[str]]:
        found = (
            [] if cfg.loader_workers else [{"rule": "data-loader", "at_stake_ns": 1, "evidence": "loader"}]
        )
        return opt.real_timed(cfg), {"advice": {"health": {}, "findings": found}}, []

    store = ResultsStore(tmp_db)
    cfg = RunConfig(model="tiny", device="cpu", warmup=1, steps=3, context_length=64, plant="slow-loader")
    done = opt.optimize(cfg, store, capture=capture, repeats=2, budget=None)
    (t,) = done.tried
    assert (t.fix, len(t.runs), t.gone) == ("loader-workers", 2, True)
    assert t.verdict in (opt.FASTER, opt.SAME, opt.SLOWER) or t.verdict.startswith(opt.INCONCLUSIVE)
    assert all(after.config.loader_workers == 2 for _, after in t.runs)
    assert all(before.config.loader_workers == 0 for before, _ in t.runs)
    assert (
        t.per_token is not None
        and t.per_token.basis == "runs"
        and t.per_token.ci_low_pct < t.per_token.ci_high_pct
    )
    assert len(store.runs(experiment=done.experiment)) == 6  # two captures, two rounds of two


def test_a_plant_whose_finding_is_not_in_the_baseline_says_why(tmp_db: str) -> None:
    machine = Machine({}, [], {})
    hidden = run(machine, config(plant="math-attention"), ResultsStore(tmp_db), repeats=1)
    (line,) = [n for n in hidden.notes if n.startswith("--plant")]
    assert line.startswith("--plant math-attention does not show in a cpu capture")
    shown = run(machine, config(plant="slow-loader"), ResultsStore(tmp_db), repeats=1)
    (line,) = [n for n in shown.notes if n.startswith("--plant")]
    assert line.startswith("--plant slow-loader: its finding (data-loader) did not fire")
    fired = Machine({}, ["data-loader"], {})
    found = run(fired, config(plant="slow-loader"), ResultsStore(tmp_db), repeats=1)
    assert not [n for n in found.notes if n.startswith("--plant")]


def test_the_final_configuration_is_a_command_that_runs_it_again(
    tmp_db: str, monkeypatch, nsys_bin: str
) -> None:
    """The note of the final configuration is a `harness run` line with the plant and each fix kept, and
    that line, parsed and checked as `run` does, makes the very configuration optimize ended with (a fix
    that changes what the plant sets included: launch-bound's batch 1 made larger)."""
    import shlex

    from harness.cli import optimize as optimize_cli

    machine = Machine({"larger-batch": 1.2}, ["launch-bound"], {"larger-batch": "launch-bound"})
    ended: list[opt.Optimisation] = []
    real = opt.optimize

    def optimize(config: RunConfig, store: ResultsStore, **kw: Any) -> opt.Optimisation:
        ended.append(real(config, store, capture=machine.capture, timed=machine.timed, budget=None))
        return ended[0]

    monkeypatch.setattr(optimize_cli.opt, "optimize", optimize)
    args = ["optimize", "tiny", "--device", "cpu", "--plant", "launch-bound", "--db", tmp_db]
    r = runner.invoke(app, args, env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    final = ended[0].final
    assert final.fixes == ["larger-batch"] and final.batch_size > 1, r.output
    (line,) = [x for x in r.output.splitlines() if "final configuration" in x]
    prefix = "note: final configuration: larger-batch; to run it again: "
    assert line.startswith(prefix), line
    command = shlex.split(line.removeprefix(prefix))
    batch = str(final.batch_size)
    assert command == ["harness", "run", "tiny", "--device", "cpu", "--batch-size", batch, "--warmup", "1",
                       "--steps", "3", "--plant", "launch-bound", "--fix", "larger-batch"]  # fmt: skip

    assert checked_as_run(monkeypatch, command, tmp_db) == final


def checked_as_run(monkeypatch: pytest.MonkeyPatch, command: list[str], db: str) -> RunConfig:
    """The configuration `command` (a `harness run …` line) makes, checked as `run` checks it; nothing run."""
    import harness.cli.run as run_cli

    made: list[RunConfig] = []
    real_prepare = run_cli.prepare

    def prepare(*args: Any, **kw: Any) -> Any:
        made.append(real_prepare(*args, **kw).config)
        raise SystemExit(0)

    monkeypatch.setattr(run_cli, "prepare", prepare)
    r = runner.invoke(app, [*command[1:], "--db", db])
    assert r.exit_code == 0, r.output
    return made[0]


def test_the_final_configuration_of_an_unplanted_model_is_a_command_run_takes(
    tmp_db: str, monkeypatch: pytest.MonkeyPatch, nsys_bin: str
) -> None:
    """No plant, a larger batch kept: the line ended `--fix larger-batch`, which `harness run` refuses for a
    run that plants nothing. The batch alone makes the same step."""
    import shlex

    machine = Machine({"larger-batch": 1.2}, ["launch-bound"], {"larger-batch": "launch-bound"})
    optimize_on(monkeypatch, machine)
    r = runner.invoke(app, ["optimize", "tiny", "--device", "cpu", "--db", tmp_db], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    prefix = "note: final configuration: larger-batch; to run it again: "
    (line,) = [x for x in r.output.splitlines() if x.startswith(prefix)]
    command = shlex.split(line.removeprefix(prefix))
    assert command == ["harness", "run", "tiny", "--device", "cpu", "--batch-size", "8", "--warmup", "1",
                       "--steps", "3"]  # fmt: skip
    made = checked_as_run(monkeypatch, command, tmp_db)
    assert made.batch_size == 8 and made.plant is None


class Stopped(Machine):
    """A Machine whose timed run number `at` (0-based, captures not counted) is stopped by Ctrl-C, as a
    worker reports it."""

    def __init__(self, at: int, *args: Any) -> None:
        super().__init__(*args)
        self.at, self.capturing = at, False

    def capture(self, config: RunConfig) -> tuple[RunResult, dict[str, Any], list[str]]:
        self.capturing = True
        try:
            return super().capture(config)
        finally:
            self.capturing = False

    def timed(self, config: RunConfig) -> RunResult:
        result = super().timed(config)
        if not self.capturing and len(self.timed_runs) - 1 == self.at:
            result.status, result.error = "interrupted", "interrupted by SIGINT after 1 of 3 measured steps"
        return result


def test_ctrl_c_in_a_round_starts_no_other_run_and_keeps_what_finished(tmp_db: str) -> None:
    """An interrupted run made its change `failed` and optimize went on: the other side of the round was
    started after Ctrl-C, then the next candidates, their captures and the final check."""
    machine = Stopped(2, {"loader-workers": 0.6, "larger-batch": 0.7}, ["data-loader", "launch-bound"], {})
    store = ResultsStore(tmp_db)
    done = run(machine, config(plant="slow-loader"), store, repeats=2)
    assert len(machine.timed_runs) == 3  # round 1 both sides, round 2's "before", then nothing
    assert len(machine.captures) == 1  # the baseline's alone
    assert done.interrupted == 2  # SIGINT
    (t,) = done.tried
    assert t.verdict == opt.STOPPED and len(t.runs) == 1
    runs = store.runs(experiment=done.experiment)
    assert sorted(runs["status"]) == ["interrupted", "ok", "ok", "ok"]  # the capture and the three timed
    assert any("stored as interrupted, no run after it" in n for n in done.notes)


@pytest.mark.parametrize("at", [4, 5])  # round 3's run of the configuration before it, of the candidate
def test_a_run_stopped_in_a_round_leaves_its_change_not_judged_not_failed(tmp_db: str, at: int) -> None:
    """A timed run that SIGTERM (or Ctrl-C) stopped, as a worker reports it, made its change's verdict
    `failed: the candidate ended interrupted: …`, as though the change had broken the run; now the change
    is not judged, with the rounds that finished, its stored run's verdict so too."""

    class Terminated(Stopped):
        def timed(self, config: RunConfig) -> RunResult:
            result = super().timed(config)
            if result.status == "interrupted":
                result.error = "interrupted by SIGTERM after 0 of 3 measured steps"
            return result

    machine = Terminated(at, {"loader-workers": 0.6}, ["data-loader"], {})
    store = ResultsStore(tmp_db)
    done = run(machine, config(plant="slow-loader"), store, repeats=3)
    assert done.interrupted == signal.SIGTERM and len(machine.captures) == 1
    row = opt.verdict_table(done).set_index("Change").loc["loader-workers"]
    assert (row["Verdict"], row["Rounds"]) == ("not judged: interrupted by SIGTERM after 2 rounds", 2)
    assert done.accepted == []
    verdicts = {p.get("verdict") for p in store.runs(experiment=done.experiment)["optimize"]}
    assert opt.FAILED not in verdicts and (opt.STOPPED in verdicts) == (at == 5)


def test_ctrl_c_in_the_baseline_only_runs_ends_there(tmp_db: str) -> None:
    machine = Stopped(0, {}, [], {})
    done = run(machine, config(), ResultsStore(tmp_db), repeats=3)
    assert len(machine.timed_runs) == 1 and done.interrupted == 2 and done.baseline_runs == []


class StoppedCapture(Machine):
    """A Machine whose captures are stopped by Ctrl-C, as the run under nsys reports it."""

    def capture(self, config: RunConfig) -> tuple[RunResult, dict[str, Any], list[str]]:
        result, _, notes = super().capture(config)
        result.status, result.error = "interrupted", "interrupted by SIGINT after 1 of 3 measured steps"
        return result, {"profiler": "nsys"}, notes


def test_ctrl_c_in_the_baseline_capture_says_no_findings_were_judged(tmp_db: str) -> None:
    """The baseline's capture stopped by Ctrl-C: its row says nothing of findings (it said `0 findings`, a
    count from a capture nobody examined); a capture examined says its count as people read it."""
    done = run(StoppedCapture({}, ["data-loader"], {}), config(), ResultsStore(tmp_db), repeats=1)
    assert done.interrupted == 2 and done.findings is None
    base = opt.verdict_table(done).iloc[0]
    assert (base["Change"], base["Finding"]) == ("baseline", "—")
    examined = run(Machine({}, ["data-loader"], {}), config(), ResultsStore(tmp_db), repeats=1)
    assert opt.verdict_table(examined).iloc[0]["Finding"] == "1 finding"


def optimize_on(monkeypatch: pytest.MonkeyPatch, machine: Machine) -> None:
    """`harness optimize MODEL` run on `machine` (its captures and timed runs), two rounds, no budget."""
    real = opt.optimize

    def on_machine(cfg: RunConfig, store: ResultsStore, **kw: Any) -> opt.Optimisation:
        return real(cfg, store, capture=machine.capture, timed=machine.timed, repeats=2, budget=None)

    monkeypatch.setattr(opt, "optimize", on_machine)


def test_optimize_with_no_change_measured_sends_no_one_to_a_waterfall(
    tmp_db: str, monkeypatch: pytest.MonkeyPatch, nsys_bin: str
) -> None:
    """No finding, no change tried: the note said `harness dashboard` draws its waterfall, and the panel
    says no change was measured against the baseline."""
    optimize_on(monkeypatch, Machine({}, [], {}))
    r = runner.invoke(app, ["optimize", "tiny", "--device", "cpu", "--format", "json", "--db", tmp_db])
    assert r.exit_code == 0, r.output
    said = " ".join(r.stderr.split())
    assert "the baseline's capture has no finding: no change to try" in said
    assert "waterfall" not in said and re.search(r"note: optimize-\S+: \d+ s", said)


def test_optimize_stopped_by_ctrl_c_exits_130_after_its_table(
    tmp_db: str, monkeypatch: pytest.MonkeyPatch, nsys_bin: str
) -> None:
    optimize_on(monkeypatch, Stopped(0, {}, [], {}))
    r = runner.invoke(app, ["optimize", "tiny", "--device", "cpu", "--format", "json", "--db", tmp_db])
    assert r.exit_code == 130, r.output
    assert json.loads(r.stdout)  # the table of what finished, then the exit


def test_a_budget_the_baseline_capture_spends_says_why_the_baseline_has_no_figures(tmp_db: str) -> None:
    """`--budget 1`: the capture ran, no timed run fitted, and the table's empty baseline row was all it said
    (with "its figures above")."""
    machine = Machine({}, [], {})
    done = run(machine, config(), ResultsStore(tmp_db), repeats=2, budget=1e-9)
    assert machine.timed_runs == [] and done.baseline_runs == []
    assert any(
        n.startswith("the budget (1e-09 s) left no room for a timed run of the baseline") for n in done.notes
    )


class Untrusting(Machine):
    """Captures whose examination failed health checks where a configuration has one of `broken`'s fixes (a
    baseline's, with "base"): their findings are the same, their time at stake from what is left."""

    def __init__(self, broken: set[str], *args: Any) -> None:
        super().__init__(*args)
        self.broken = broken

    def capture(self, config: RunConfig) -> tuple[RunResult, dict[str, Any], list[str]]:
        result, how, notes = super().capture(config)
        if self.broken & set(config.fixes or ["base"]):
            how["advice"]["untrusted"] = "NVTX steps: measured step 2 lacks its step range"
            result.status = "degraded"
        return result, how, notes


def test_an_untrusted_capture_proposes_nothing_and_says_no_finding_gone(tmp_db: str) -> None:
    """A capture that failed its health checks: the baseline's proposes no change (one line, exit 1); a
    change's own capture cannot say whether its finding is gone, nor propose what comes next."""
    machine = Untrusting({"loader-workers"}, {"loader-workers": 0.6}, ["data-loader", "host-sync"],
                         {"loader-workers": "data-loader"})  # fmt: skip
    done = run(machine, config(plant="slow-loader"), ResultsStore(tmp_db), repeats=2)
    workers = next(t for t in done.tried if t.fix == "loader-workers")
    assert workers.verdict == opt.FASTER and workers.gone is None  # not "yes" from a broken capture
    assert opt.verdict_table(done).set_index("Change").loc["loader-workers", "Finding gone"] == "—"
    (said,) = [n for n in done.notes if "cannot be trusted" in n]
    assert said.endswith(
        "(NVTX steps: measured step 2 lacks its step range): whether loader-workers removed its finding is "
        "not judged, and no change is proposed from it"
    )
    broken = Untrusting({"base"}, {}, ["data-loader"], {})
    with pytest.raises(HarnessError, match="no change is proposed from its findings"):
        run(broken, config(plant="slow-loader"), ResultsStore(tmp_db), repeats=2)
    assert broken.timed_runs == []  # nothing measured against findings that cannot be trusted


def test_optimize_of_a_run_takes_minus_n_and_refuses_an_untrusted_one(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    found = [{"rule": "data-loader", "at_stake_ns": 7_000_000, "evidence": "the loader's range: 7 ms"}]
    first = Machine({}, [], {}).timed(config())
    save_run(store, first, advice={"health": {}, "findings": found})
    r = runner.invoke(app, ["optimize", "-1", "--db", tmp_db, "--format", "json"])
    assert r.exit_code == 0, r.output
    (rows,) = [
        v for k, v in json.loads(r.stdout).items() if k.startswith(f"proposals for run {first.run_id}")
    ]
    assert [(row["Finding"], row["Change"]) for row in rows] == [("data-loader", "loader-workers")]
    degraded = Machine({}, [], {}).timed(config())
    degraded.status = "degraded"
    save_run(
        store, degraded, advice={"health": {}, "findings": found, "untrusted": "capture: no event recorded"}
    )
    for ref in ("-1", degraded.run_id):
        r = runner.invoke(app, ["optimize", ref, "--db", tmp_db, "--format", "json"])
        assert r.exit_code == 1 and r.stdout == ""
        assert (
            f"no proposals for {degraded.run_id}: its capture cannot be trusted (capture: no event recorded)"
            in " ".join(r.stderr.split())
        )


def test_optimize_of_a_missing_trace_says_no_such_file(tmp_db: str) -> None:
    """A Kineto trace's name (`.json`, `.json.gz`) that is not there is a missing file, as `advise` says, not
    a run id no run has."""
    for name in ("trace.json.gz", "trace.json"):
        r = runner.invoke(app, ["optimize", name], env={"HARNESS_DB": tmp_db})
        assert r.exit_code != 0 and r.stderr.startswith(f"error: no such file: {name} (and it is not one")


def test_optimize_of_an_untrusted_export_proposes_nothing(tmp_db: str, tmp_path: Path) -> None:
    """An export whose capture holds no event (a capture range that never started) fails its health: no
    proposal is made from it, as `advise` ranks no finding of it."""
    empty = tmp_path / "empty.sqlite"
    shutil.copy(CPU_TRAIN, empty)
    with sqlite3.connect(empty) as db:
        db.execute("DELETE FROM NVTX_EVENTS")
        db.execute("DELETE FROM OSRT_API")
    r = runner.invoke(app, ["optimize", str(empty), "--format", "csv"], env={"HARNESS_DB": tmp_db})
    assert r.exit_code == 1 and r.stdout == ""
    assert f"no proposals for {empty}: its capture cannot be trusted (capture:" in " ".join(r.stderr.split())


class LateSignal(Machine):
    """A Machine where Ctrl-C comes as timed run number `at` (0-based, captures not counted) or capture
    number `capture_at` ends: the run is whole, the signal held until it is stored."""

    def __init__(self, *args: Any, at: int | None = None, capture_at: int | None = None) -> None:
        super().__init__(*args)
        self.at, self.capture_at, self.capturing = at, capture_at, False

    def capture(self, config: RunConfig) -> tuple[RunResult, dict[str, Any], list[str]]:
        self.capturing = True
        try:
            got = super().capture(config)
        finally:
            self.capturing = False
        if len(self.captures) - 1 == self.capture_at:
            os.kill(os.getpid(), signal.SIGINT)
        return got

    def timed(self, config: RunConfig) -> RunResult:
        result = super().timed(config)
        if not self.capturing and len(self.timed_runs) - 1 == self.at:
            os.kill(os.getpid(), signal.SIGINT)
        return result


@pytest.mark.usefixtures("sigint_raises")
def test_ctrl_c_as_a_round_ends_keeps_the_round_and_judges_no_change_on_it(tmp_db: str) -> None:
    """Ctrl-C held while a round was stored ended optimize with "interrupted by SIGINT before the command
    finished" and none of its table; the change measured so far is shown, not judged, and not kept."""
    machine = LateSignal({"loader-workers": 0.6}, ["data-loader"], {}, at=1)
    store = ResultsStore(tmp_db)
    done = run(machine, config(plant="slow-loader"), store, repeats=2)
    assert done.interrupted == signal.SIGINT
    assert len(machine.timed_runs) == 2 and len(machine.captures) == 1  # round 1, then nothing
    (t,) = done.tried
    assert len(t.runs) == 1 and done.accepted == [] and done.final.fixes == []
    row = opt.verdict_table(done).set_index("Change").loc["loader-workers"]
    assert (row["Verdict"], row["Rounds"]) == ("not judged: interrupted by SIGINT after 1 round", 1)
    assert "interrupted by SIGINT between runs: every run before it is stored, no run after it" in done.notes
    assert sorted(store.runs(experiment=done.experiment)["status"]) == ["ok", "ok", "ok"]


@pytest.mark.usefixtures("sigint_raises")
def test_ctrl_c_as_a_kept_changes_capture_ends_keeps_the_change(tmp_db: str) -> None:
    """The change was judged faster over its rounds, then Ctrl-C came as its own capture ended: the change
    is kept in the final configuration and its capture stored."""
    machine = LateSignal({"loader-workers": 0.6}, ["data-loader"], {}, capture_at=1)
    store = ResultsStore(tmp_db)
    done = run(machine, config(plant="slow-loader"), store, repeats=2)
    assert done.interrupted == signal.SIGINT
    assert [t.fix for t in done.accepted] == ["loader-workers"] and done.final.fixes == ["loader-workers"]
    assert len(machine.captures) == 2 and len(machine.timed_runs) == 4
    assert len(store.runs(experiment=done.experiment)) == 6


@pytest.mark.usefixtures("sigint_raises")
def test_optimize_stopped_as_a_round_ends_exits_130_after_its_table(
    tmp_db: str, monkeypatch: pytest.MonkeyPatch, nsys_bin: str
) -> None:
    optimize_on(monkeypatch, LateSignal({"loader-workers": 0.6}, ["data-loader"], {}, at=1))
    asked = ["optimize", "tiny", "--device", "cpu", "--plant", "slow-loader", "--format", "json"]
    r = runner.invoke(app, [*asked, "--db", tmp_db])
    assert r.exit_code == 130, r.output
    (table,) = [v for k, v in json.loads(r.stdout).items() if k.startswith("optimize tiny")]
    rows = {row["Change"]: row for row in table}
    assert rows["loader-workers"]["Verdict"] == "not judged: interrupted by SIGINT after 1 round"
    assert "before the command finished" not in r.stderr
