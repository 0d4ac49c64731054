"""torch.compile: compile time (the first step) kept apart, eager against compiled side by side.

Everything but the one end-to-end run is checked on runs stored with known step times (real RunResult
objects in a real results database): compiling tiny on this CPU takes a minute or more.
"""

from __future__ import annotations

import json
import math
import sqlite3
import statistics
from dataclasses import replace

import pytest
from dashboard_data import MODELS
from typer.testing import CliRunner

from analysis.compare.compile import COMPILE, REMAINDER, compile_comparison
from analysis.dashboard.compile import compile_panel
from analysis.dashboard.panel import DashboardData
from harness.cli import app
from harness.core.records import RunConfig, RunResult, StepRecord
from harness.execution.compiled import compile_table
from harness.experiments.run_tables import compile_rows
from harness.profilers.capture import finish
from harness.profilers.capture import save as save_run
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
    return finish(result)  # its first step and compile time, as a run is finished before it is stored


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
    save_run(store, EAGER)
    save_run(store, COMPILED)
    # a profiled compiled run of the same configuration is not the steady state: left out of the pairing
    save_run(
        store, made("tiny-compiled-nsys", True, (1, 1, 1), [(MS, MS, MS)]), profiler="nsys", nsys_mode="light"
    )
    # a configuration with only an eager run has nothing to compare
    lone = made("tiny-lone", False, (1, 1, 1), [(MS, MS, MS)])
    lone.config.batch_size = 8
    save_run(store, lone)
    return store


def test_comparison_pairs_eager_and_compiled_of_the_same_configuration(store: ResultsStore) -> None:
    table = compile_table(store).set_index("phase")
    assert list(table.index) == ["forward", "backward", "optimizer", REMAINDER, "step"]
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
    assert [r["phase"] for r in rows] == ["forward", "backward", "optimizer", REMAINDER, "step"]
    assert rows[-1]["speed-up"] == pytest.approx(1.75)
    shown = runner.invoke(app, ["compare-compile", "--wide"], catch_exceptions=False).stdout
    assert "(ms)" in shown and "(ns)" not in shown and "speed-up" in shown and "1.750" in shown


def test_compare_compile_without_pairs_says_how(tmp_db: str) -> None:
    save_run(ResultsStore(tmp_db), EAGER)
    result = runner.invoke(app, ["compare-compile"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "harness run tiny --device cpu --compile" in " ".join(result.output.split())


def test_compile_panel(store: ResultsStore) -> None:
    data = DashboardData(runs=store.runs(), steps=store.step_timings())
    panel = compile_panel(data)
    eager, compiled = panel.figure.data
    assert (eager.name, compiled.name) == ("eager", "compiled")
    assert list(eager.y) == pytest.approx([10, 20, 5, 0, 35]) and list(compiled.y) == pytest.approx(
        [5, 10, 5, 0, 20]
    )
    assert list(compiled.text) == ["×2.00", "×2.00", "×1.00", "", "×1.75"]
    assert any("compile (first step) 68,986.000 ms" in n for n in panel.notes)
    assert compile_panel(DashboardData()).missing.startswith("no configuration run both eager and compiled")


def test_comparison_of_no_runs_is_empty() -> None:
    assert compile_comparison(DashboardData().runs, DashboardData().steps).empty


@pytest.mark.slow
@pytest.mark.elsewhere
def test_compile_run_shows_compile_time_apart(tmp_db: str) -> None:
    """The issue's command, for real: torch.compile on the CPU (about a minute for tiny)."""
    result = runner.invoke(
        app, ["run", "tiny", "--device", "cpu", "--compile", "--steps", "3"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert "compile (first step)" in result.stdout
    (run,) = ResultsStore(tmp_db).runs().to_dict("records")
    stored = ResultsStore(tmp_db).get(run["run_id"]).summary
    # compile = the first step − the median measured step, not clipped: its sign depends on the machine's
    # load and on a warm cache, so the arithmetic is what is asserted
    timings = ResultsStore(tmp_db).step_timings([run["run_id"]])
    steps = timings.groupby("step")["duration_ns"].sum()
    measured = steps[sorted(set(timings.loc[~timings["warmup"], "step"]))]
    assert len(measured) == 3 and stored["first_step_ns"] == steps[0]
    assert stored["compile_ns"] == round(steps[0] - statistics.median(measured))
    cache = stored["inductor_cache"]  # torch's own counters: graphs compiled afresh or loaded
    assert cache["hits"] + cache["misses"] > 0 and cache["state"] in ("warm", "cold", "partly warm")
    assert "torch.compile cache (Inductor FX graphs)" in result.stdout
    shown = runner.invoke(app, ["show", run["run_id"], "--format", "json"], catch_exceptions=False)
    table = json.loads(shown.stdout)["compile (first step)"]
    assert table[-1]["phase"] == "step" and table[-1]["compile (first step) (ns)"] == stored["compile_ns"]


# Medians chosen so that the median step (sum of each step's phases) is not the sum of the phases' medians.
SKEWED_EAGER = made(
    "tiny-skewed-eager",
    False,
    (13 * MS, 30 * MS, 6 * MS),
    [
        (10 * MS, 30 * MS, 5 * MS),
        (14 * MS, 20 * MS, 5 * MS),
        (11 * MS, 26 * MS, 7 * MS),
        (12 * MS, 24 * MS, 6 * MS),
    ],
)
SKEWED_COMPILED = made(
    "tiny-skewed-compiled",
    True,
    (900 * MS, 700 * MS, 9 * MS),
    [
        (5 * MS, 12 * MS, 3 * MS),
        (7 * MS, 9 * MS, 4 * MS),
        (6 * MS, 11 * MS, 3 * MS),
        (4 * MS, 10 * MS, 5 * MS),
    ],
)


def _json(*args: str) -> object:
    result = runner.invoke(app, [*args, "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_every_command_gives_one_figure_the_same_value(tmp_db: str) -> None:
    """The steady median of a phase is computed once (analysis.runs.steady) and `show`'s phase
    table, `show`'s compile table, `compare-compile` and the dashboard's compile panel all print it."""
    store = ResultsStore(tmp_db)
    save_run(store, SKEWED_EAGER)
    save_run(store, SKEWED_COMPILED)
    compared = {r["phase"]: r for r in _json("compare-compile")}
    panel = compile_panel(DashboardData(runs=store.runs(), steps=store.step_timings()))
    eager_bars, compiled_bars = (dict(zip(t.x, t.y, strict=True)) for t in panel.figure.data)
    for run, side in ((SKEWED_EAGER, "eager"), (SKEWED_COMPILED, "compiled")):
        shown = _json("show", run.run_id)
        medians = {r["Phase"]: r["Med (ns)"] for r in shown["phases (measured steps)"]}
        bars = eager_bars if side == "eager" else compiled_bars
        for phase in ("forward", "backward", "optimizer"):
            figure = medians[phase]
            assert compared[phase][f"{side} (ns)"] == figure
            assert bars[next(x for x in bars if x.endswith(f"<br>{phase}"))] * MS == pytest.approx(figure)
            if side == "compiled":
                rows = {r["phase"]: r for r in shown["compile (first step)"]}
                assert rows[phase]["steady median (ns)"] == figure
    step = medians.pop("step (sum)")  # show's step row: the median of the steps, as compare-compile's
    assert medians == {"forward": 5.5 * MS, "backward": 10.5 * MS, "optimizer": 3.5 * MS}
    # the step: sums 20, 20, 20, 19 ms → median 20 ms, while the phases' medians add up to 19.5 ms
    compiled_show = {r["phase"]: r for r in _json("show", SKEWED_COMPILED.run_id)["compile (first step)"]}
    assert compiled_show["step"]["steady median (ns)"] == compared["step"]["compiled (ns)"] == step == 20 * MS
    assert compiled_show[REMAINDER]["steady median (ns)"] == compared[REMAINDER]["compiled (ns)"] == 0.5 * MS
    for table, col in ((compiled_show, "steady median (ns)"), (compared, "compiled (ns)")):
        parts = [table[p][col] for p in ("forward", "backward", "optimizer", REMAINDER)]
        assert sum(parts) == table["step"][col]  # the phases add up to the step
    for col in (COMPILE, "compiled first step (ns)", "eager (ns)", "eager first step (ns)"):
        parts = [compared[p][col] for p in ("forward", "backward", "optimizer", REMAINDER)]
        assert sum(parts) == pytest.approx(compared["step"][col])
    assert compiled_show["step"]["compile (first step) (ns)"] == compared["step"][COMPILE] == 1_589 * MS


def test_compare_compile_has_spread_and_intervals(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, SKEWED_EAGER)
    save_run(store, SKEWED_COMPILED)
    rows = {r["phase"]: r for r in _json("compare-compile")}
    backward = rows["backward"]
    # eager backward: 20, 24, 26, 30 ms → std 4.163 ms; four steps are too few for a 95% interval of the
    # median from order statistics, so it is the whole range
    assert backward["eager std (ns)"] == pytest.approx(4_163_332.0, rel=1e-6)
    assert (backward["eager CI low (ns)"], backward["eager CI high (ns)"]) == (20 * MS, 30 * MS)
    assert backward["speed-up"] == pytest.approx(25 / 10.5)
    assert backward["speed-up CI low"] < backward["speed-up"] < backward["speed-up CI high"]
    assert rows[REMAINDER]["speed-up"] is None  # a difference has no speed-up
    shown = runner.invoke(app, ["compare-compile"], env={"COLUMNS": "80"}, catch_exceptions=False).output
    lines = {line.split("│")[2].strip(): line for line in shown.splitlines() if line.startswith("│")}
    low, high = backward["speed-up CI low"], backward["speed-up CI high"]
    assert f"{low:.2f}…{high:.2f}" in lines["backward"]  # both bounds, one column, at 80 columns
    assert "2.381" in lines["backward"]


def test_median_interval_from_order_statistics() -> None:
    from analysis.runs.steady import median_rank, steady

    assert [median_rank(n) for n in (5, 6, 10, 20)] == [0, 1, 2, 6]
    s = steady(list(range(1, 11)))  # 1..10: the 2nd and 9th values bound the median at ≥95%
    assert (s.median_ns, s.ci_low_ns, s.ci_high_ns) == (5.5, 2.0, 9.0)


def test_baseline_is_explicit_and_can_be_named(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, EAGER)
    save_run(store, COMPILED)
    newer = made("tiny-eager-newer", False, (40 * MS, 40 * MS, 10 * MS), [(20 * MS, 40 * MS, 10 * MS)] * 3)
    save_run(store, newer)
    default = runner.invoke(app, ["compare-compile"], env={"COLUMNS": "80"}, catch_exceptions=False)
    said = " ".join(default.output.split())
    assert (
        "baseline: eager run tiny-eager-newer (the newest of 2 eager runs of this configuration; "
        "--baseline RUN picks another); compiled run tiny-compiled" in said
    )
    rows = {r["phase"]: r for r in _json("compare-compile")}
    assert rows["step"]["eager run"] == "tiny-eager-newer" and rows["step"]["speed-up"] == pytest.approx(3.5)
    named = runner.invoke(app, ["compare-compile", "--baseline", "tiny-eager"], catch_exceptions=False)
    assert "baseline: eager run tiny-eager (named by --baseline)" in " ".join(named.output.split())
    rows = {r["phase"]: r for r in _json("compare-compile", "--baseline", "tiny-eager")}
    assert rows["step"]["eager run"] == "tiny-eager" and rows["step"]["speed-up"] == pytest.approx(1.75)
    for bad, why in (("nope", "no run with id 'nope'"), ("tiny-compiled", "is not an eager run")):
        result = runner.invoke(app, ["compare-compile", "--baseline", bad], catch_exceptions=False)
        assert result.exit_code == 2 and why in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_an_instrumented_eager_run_is_no_baseline_for_a_plain_compiled_one(tmp_db: str) -> None:
    from dataclasses import replace

    store = ResultsStore(tmp_db)
    save_run(store, EAGER)
    save_run(store, COMPILED)
    # newer, and slowed by what it records: --nvtx-detail's synchronised hooks, --memory's profiler
    for i, what in enumerate(({"nvtx_detail": True}, {"memory": True}, {"plant": "host-sync"})):
        slowed = made(
            f"tiny-eager-{i}", False, (40 * MS, 40 * MS, 10 * MS), [(20 * MS, 40 * MS, 10 * MS)] * 3
        )
        slowed.config = replace(slowed.config, **what)
        save_run(store, slowed)
    rows = {r["phase"]: r for r in _json("compare-compile")}
    assert rows["step"]["eager run"] == "tiny-eager"  # it took the newest: a speed-up of 3.5, not 1.75
    assert rows["step"]["speed-up"] == pytest.approx(1.75)
    said = " ".join(runner.invoke(app, ["compare-compile"], env={"COLUMNS": "80"}).output.split())
    assert "baseline: eager run tiny-eager (the only eager run of this configuration)" in said
    from harness.execution.compiled import with_setup

    panel = compile_panel(DashboardData(runs=with_setup(store, store.runs()), steps=store.step_timings()))
    assert list(panel.figure.data[1].text)[-1] == "×1.75"  # the dashboard's panel pairs them the same way


def test_inductor_cache_state_is_said(tmp_db: str) -> None:
    from harness.execution.compiled import cache_state

    assert [cache_state(3, 0), cache_state(0, 3), cache_state(1, 2), cache_state(0, 0)] == [
        "warm",
        "cold",
        "partly warm",
        "unknown",
    ]
    store = ResultsStore(tmp_db)
    save_run(store, EAGER)
    warm = made("tiny-compiled-warm", True, (900 * MS, 700 * MS, 9 * MS), [(5 * MS, 10 * MS, 5 * MS)] * 3)
    warm.extra["inductor_cache"] = {"hits": 4, "misses": 0, "state": "warm"}
    save_run(store, warm)
    said = " ".join(runner.invoke(app, ["compare-compile"], catch_exceptions=False).output.split())
    assert (
        "compiled run tiny-compiled-warm: the cache was warm: the compile time is a cache load, not a "
        "compilation (4 FX graphs from the cache, 0 compiled)" in said
    )
    shown = _json("show", "tiny-compiled-warm")["torch.compile cache (Inductor FX graphs)"]
    assert shown == [{"state": "warm", "FX graphs from the cache": 4, "FX graphs compiled": 0}]


# a compiled run whose first backward (2 s) was faster than its median (2.834 s): its compilation is counted
# in another phase of the first step
EARLY_EAGER = made(
    "tiny-early-eager", False, (30 * MS, 2_900 * MS, 5 * MS), [(25 * MS, 2_900 * MS, 5 * MS)] * 3
)
EARLY = made(
    "tiny-early-compiled", True, (40_000 * MS, 2_000 * MS, 7 * MS), [(10 * MS, 2_834 * MS, 5 * MS)] * 3
)


def test_a_phase_faster_in_the_first_step_keeps_its_sign_and_the_rows_add_up(tmp_db: str) -> None:
    """Compile = first step − median for every row, never clipped: the backward row is −834 ms, and the
    phases' compile times add up to the step's with no remainder (the first step has none, nor the
    median); the table's notes say so."""
    store = ResultsStore(tmp_db)
    save_run(store, EARLY_EAGER)
    save_run(store, EARLY)
    table = compile_table(store).set_index("phase")
    assert table.loc["backward", COMPILE] == -834 * MS
    assert table.loc["forward", COMPILE] == 39_990 * MS and table.loc["optimizer", COMPILE] == 2 * MS
    assert table.loc[REMAINDER, COMPILE] == 0
    assert table.loc["step", COMPILE] == (42_007 - 2_849) * MS
    phases = table.loc[["forward", "backward", "optimizer", REMAINDER], COMPILE].sum()
    assert phases == table.loc["step", COMPILE]
    assert EARLY.extra["compile_phases_ns"]["backward"] == -834 * MS  # the run's own table: the same figure
    assert EARLY.extra["compile_ns"] == table.loc["step", COMPILE]
    notes = " ".join(compile_table(store).attrs["notes"])
    assert "not clipped at zero" in notes and "a negative compile time" in notes


@pytest.mark.slow
def test_dynamos_recompile_limit_is_counted() -> None:
    """A function compiled with dynamic=False called with a new shape each time: Dynamo recompiles it up to
    its limit, then gives up and runs it eagerly; the counters the run keeps say both."""
    import torch

    from harness.execution.compiled import dynamo_counts

    before = dynamo_counts()
    limit = torch._dynamo.config.recompile_limit
    f = torch.compile(lambda x: (x * 2).sum(), dynamic=False)
    for n in range(2, limit + 4):
        f(torch.ones(n))
    grown = {name: n - before[name] for name, n in dynamo_counts().items()}
    assert grown["frames"] == limit and grown["recompile_limit_hits"] == 1


def generate_made(
    run_id: str, compiled: bool, first: tuple[int, int], measured: tuple[int, int]
) -> RunResult:
    """A generate run: one warmup step `first`, then three measured steps `measured` (prefill, decode)."""
    steps = [StepRecord(0, True, {"prefill": first[0], "decode": first[1]})]
    steps += [StepRecord(i + 1, False, {"prefill": measured[0], "decode": measured[1]}) for i in range(3)]
    config = RunConfig("tiny", mode="generate", device="cpu", compile=compiled, warmup=1, steps=3)
    result = RunResult(run_id, config, "ok", device="cpu", model=MODELS["tiny"], steps=steps)
    return finish(result)  # its first step and compile time, as a run is finished before it is stored


# --compile compiles generate's decode step only: this run's first prefill (300 ms) was faster than its
# median (950 ms), which is no compilation
GEN_EAGER = generate_made("tiny-gen-eager", False, (900 * MS, 260 * MS), (870 * MS, 250 * MS))
GEN_COMPILED = generate_made("tiny-gen-compiled", True, (300 * MS, 19_000 * MS), (950 * MS, 450 * MS))


def test_a_phase_compile_leaves_eager_has_no_compile_time(tmp_db: str) -> None:
    """generate's prefill is not compiled: no compile time for it (nor for the remainder) in the run's own
    table, a stored run's or compare-compile's, never first − median (−650 ms); a note says why."""
    assert GEN_COMPILED.extra["compile_phases_ns"] == {"decode": 18_550 * MS}
    assert GEN_COMPILED.extra["compile_ns"] == (19_300 - 1_400) * MS
    store = ResultsStore(tmp_db)
    save_run(store, GEN_EAGER)
    save_run(store, GEN_COMPILED)
    rows = {r["phase"]: r for r in _json("show", GEN_COMPILED.run_id)["compile (first step)"]}
    assert rows["prefill"]["compile (first step) (ns)"] is None
    assert rows["prefill"]["note"] == "not compiled (--compile compiles generate's decode step only)"
    assert rows["decode"]["compile (first step) (ns)"] == 18_550 * MS
    assert rows[REMAINDER]["compile (first step) (ns)"] is None
    assert rows["step"]["compile (first step) (ns)"] == 17_900 * MS
    # a run stored with the prefill's figure (before it was left out) shows none either
    older = {**GEN_COMPILED.extra, "compile_phases_ns": {"prefill": -650 * MS, "decode": 18_550 * MS}}
    table = compile_rows(older, ("prefill", "decode")).set_index("phase")
    assert math.isnan(table.loc["prefill", "compile (first step) (ns)"])
    compared = compile_table(store).set_index("phase")
    assert math.isnan(compared.loc["prefill", COMPILE]) and math.isnan(compared.loc[REMAINDER, COMPILE])
    assert compared.loc["decode", COMPILE] == 18_550 * MS and compared.loc["step", COMPILE] == 17_900 * MS
    notes = compile_table(store).attrs["notes"]
    assert any(n.startswith("no compile time for prefill: not compiled") for n in notes)


def ranked(run_id: str, compiled: bool, forward: int) -> RunResult:
    """A train run across 2 ranks (1 warm-up step, 3 measured): each rank's forward `forward`, backward
    twice that, an all-reduce of 4 ms and an optimizer step of 0.5 ms."""
    config = RunConfig("tiny", device="cpu", compile=compiled, warmup=1, steps=3, nproc=2)
    phases = {"forward": forward, "backward": 2 * forward, "allreduce": 4 * MS, "optimizer": MS // 2}
    steps = [StepRecord(i, i < 1, dict(phases), rank=rank) for rank in range(2) for i in range(4)]
    return RunResult(run_id, config, "ok", device="cpu", model=MODELS["tiny"], steps=steps)


def test_runs_across_ranks_are_compared_per_rank_with_their_all_reduce(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, ranked("tiny-ranks-eager", False, MS))
    save_run(store, ranked("tiny-ranks-compiled", True, MS // 2))
    table = compile_table(store).set_index("phase")
    # each rank's phase, not their sum over the ranks; the step holds the all-reduce
    assert list(table.index) == ["forward", "backward", "allreduce", "optimizer", REMAINDER, "step"]
    assert table.loc["forward", "eager (ns)"] == MS and table.loc["forward", "compiled (ns)"] == MS // 2
    assert table.loc["allreduce", "eager (ns)"] == 4 * MS
    assert table.loc["step", "eager (ns)"] == 7.5 * MS and table.loc["step", "compiled (ns)"] == 6 * MS
    assert table.loc["step", "speed-up"] == pytest.approx(1.25)


def test_generate_configurations_of_several_new_token_counts_are_told_apart(tmp_db: str) -> None:
    """tiny generate eager and compiled at 2 and at 8 new tokens: compare-compile's rows of the two had the
    same configuration columns (its new tokens not among them), and the dashboard's compile panel drew
    both on one bar label. The new tokens are a column, and a label says them and the prompt's length."""
    store = ResultsStore(tmp_db)
    for n in (2, 8):
        for compiled in (False, True):
            run = generate_made(f"gen-{n}-{compiled}", compiled, (900 * MS, 260 * MS), (870 * MS, n * MS))
            run.config = replace(run.config, new_tokens=n)
            save_run(store, run)
    table = compile_table(store)
    decode = table[table["phase"] == "decode"].set_index("new_tokens")
    assert decode["compiled run"].to_dict() == {2: "gen-2-True", 8: "gen-8-True"}
    assert list(_json("compare-compile")[0]) == list(table.columns)
    panel = compile_panel(DashboardData(runs=store.runs(), steps=store.step_timings()))
    labels = [str(x) for x in panel.figure.data[0].x]
    assert len(set(labels)) == len(labels)
    assert any("new tokens 2" in x and "context 64" in x for x in labels)


def test_a_compiled_run_with_no_eager_run_of_its_configuration_is_named(tmp_db: str) -> None:
    """A compiled run whose configuration has no eager run was left out of the table without a word: a
    note names it, its configuration in short and the `harness run` line of the eager run that pairs it,
    on screen after the table and on stderr beside csv and json, and when no configuration pairs at all."""
    store = ResultsStore(tmp_db)
    alone = made("tiny-b2-compiled", True, (60_000 * MS, 9_000 * MS, 6 * MS), [(5 * MS, 10 * MS, 5 * MS)] * 3)
    alone.config = replace(alone.config, batch_size=2)
    save_run(store, alone)
    expected = (
        "compiled run tiny-b2-compiled is not in the table (tiny train fp32, batch 2, context 64, cpu): no "
        "eager run of its configuration to compare with; `harness run tiny --device cpu --batch-size 2 "
        "--warmup 1 --steps 3` makes one"
    )
    nothing = runner.invoke(app, ["compare-compile"], catch_exceptions=False)
    assert nothing.exit_code == 0 and expected in " ".join(nothing.output.split())
    save_run(store, EAGER)
    save_run(store, COMPILED)
    shown = runner.invoke(app, ["compare-compile"], env={"COLUMNS": "80"}, catch_exceptions=False)
    assert shown.exit_code == 0 and expected in " ".join(shown.output.split())
    assert {r["compiled run"] for r in _json("compare-compile")} == {"tiny-compiled"}
    csv = runner.invoke(app, ["compare-compile", "--format", "csv"], catch_exceptions=False)
    assert expected in " ".join(csv.stderr.split()) and "tiny-b2-compiled" not in csv.stdout


def test_a_compiled_run_stored_without_its_model_is_named_with_its_whole_line(tmp_db: str) -> None:
    """The eager run's line is made of the compiled run's configuration as the store reads it (its checks'
    reading, ResultsStore.run_configs): one stored without its model (read as the run's) and with a field
    of a newer harness was `harness run tiny --device cpu` alone, its batch, warm-up and steps lost."""
    alone = made("tiny-b2-compiled", True, (60_000 * MS, 9_000 * MS, 6 * MS), [(5 * MS, 10 * MS, 5 * MS)] * 3)
    alone.config = replace(alone.config, batch_size=2)
    save_run(ResultsStore(tmp_db), alone)
    with sqlite3.connect(tmp_db.removeprefix("sqlite:///")) as db:
        edit = "UPDATE runs SET config = json_set(json_remove(config, '$.model'), '$.newer', 1) WHERE id = ?"
        db.execute(edit, (alone.run_id,))
    said = runner.invoke(app, ["compare-compile"], catch_exceptions=False)
    line = "`harness run tiny --device cpu --batch-size 2 --warmup 1 --steps 3` makes one"
    assert said.exit_code == 0 and line in " ".join(said.output.split()), said.output
