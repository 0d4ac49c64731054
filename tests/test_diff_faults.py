"""`harness diff` under attack: a gate of nan or inf, a gate against a run with no measured
steps, a side that is a missing file, the same export on both sides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import measure_drift, need
from export_data import derive
from test_diff import CPU_TRAIN, make_run
from typer.testing import CliRunner

from harness.cli import app
from harness.core.records import RunConfig, RunResult
from harness.execution.nsys import ProfileResult
from harness.experiments.program import program_result
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

pytestmark = pytest.mark.attack
runner = CliRunner()


@pytest.fixture
def pair(tmp_db: str) -> tuple[str, str]:
    store = ResultsStore(tmp_db)
    measure_drift(store, make_run("aa", noise=0.01, seed=5))
    save_run(store, make_run("base-1", noise=0.01, seed=1))
    save_run(store, make_run("same-1", noise=0.01, seed=2))
    return "base-1", "same-1"


@pytest.mark.parametrize("gate", ["nan", "inf", "-inf", "NaN"])
def test_a_gate_that_is_not_a_number_is_refused(pair: tuple[str, str], gate: str) -> None:
    r = runner.invoke(app, ["diff", *pair, "--gate", gate])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "is not a percentage" in r.output or "not in the range" in r.output


@pytest.mark.parametrize("status", ["oom", "error"])
def test_a_gate_against_a_run_without_measured_steps_fails(tmp_db: str, status: str) -> None:
    store = ResultsStore(tmp_db)
    save_run(store, make_run("base-1", noise=0.01, seed=1))
    failed = RunResult(
        run_id="failed-1", config=RunConfig(model="tiny"), status=status, device="cpu", error="out of memory"
    )
    save_run(store, failed)
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
    assert r.output.count("left out 1 Kineto event with") == 1, r.output


def _imported(run: RunResult, tmp_path: Path) -> None:
    """`run` written as `harness run` writes a run the database would not take, then `harness import`ed."""
    from datetime import UTC, datetime

    from harness.store import unsaved

    path = unsaved.write(unsaved.PendingRun(result=run, created_at=datetime.now(UTC)), [tmp_path], "test")
    r = runner.invoke(app, ["import", str(path)])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    ("status", "error"), [("oom", "CUDA out of memory"), ("error", "RuntimeError: boom")]
)
def test_an_imported_run_that_did_not_end_ok_fails_the_gate_whatever_steps_it_holds(
    tmp_db: str, tmp_path: Path, status: str, error: str
) -> None:
    """An OOM or failed run with its measured steps (imported, as `run` wrote it) was gated as a good one:
    exit 0, no note; a degraded one was refused."""
    save_run(ResultsStore(tmp_db), make_run("base-1", noise=0.01, seed=1))
    ended = make_run("ended-1", noise=0.01, seed=2)
    ended.status, ended.error = status, error
    _imported(ended, tmp_path)
    for args in (["base-1", "ended-1"], ["ended-1", "base-1"]):
        r = runner.invoke(app, ["diff", *args, "--gate", "5"], env={"COLUMNS": "200"})
        assert r.exit_code == 1 and "Traceback" not in r.output, r.output
        said = " ".join(r.stderr.split())
        assert (
            f"gate: ended-1 ended {status} ({error}): a gate passes only between runs that ended ok" in said
        )
    _, notes = _overall(["base-1", "ended-1"])
    assert notes == [f"ended-1 ended {status} ({error}): its steps are those it measured before"]


def _without(run: RunResult, phase: str, steps: range) -> RunResult:
    for s in run.steps:
        if s.step in steps:
            s.phases.pop(phase)
    return run


def _overall(args: list[str]) -> tuple[dict, list[str]]:
    r = runner.invoke(app, ["diff", *args, "-f", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    (phases,) = [v for k, v in doc.items() if k.startswith("Phases")]
    # the runs were not profiled; the drift they are judged against is said apart
    steps = [n for n in doc["notes"] if "has no export" not in n and "drift" not in n]
    return {row["Phase"]: row for row in phases}["overall (step)"], steps


def test_steps_without_a_phase_are_left_out_of_the_overall_step_and_said(tmp_db: str) -> None:
    """A stored run with 10 of its 30 steps without `optimizer` (5 ms of 35): the overall step set their
    sums against whole steps (-4.8 %) without a word."""
    store = ResultsStore(tmp_db)
    save_run(store, make_run("whole-1", noise=0.01, seed=1))
    save_run(store, _without(make_run("short-1", noise=0.01, seed=2), "optimizer", range(2, 12)))
    overall, notes = _overall(["whole-1", "short-1"])
    assert (overall["Steps A"], overall["Steps B"]) == (30, 20)
    assert abs(overall["Δ (%)"]) < 1.5  # same work on both sides: the noise, 1% a phase
    assert notes == [
        "10 of 30 measured steps of B (short-1) do not time all of forward, backward, optimizer (step 2 "
        "lacks optimizer): left out of the overall step, whose sum would be of other work"
    ]


def test_a_phase_one_side_alone_times_is_left_out_of_the_overall_step_and_said(tmp_db: str) -> None:
    store = ResultsStore(tmp_db)
    measure_drift(store, make_run("aa", noise=0.01, seed=5))
    save_run(store, make_run("whole-1", noise=0.01, seed=1))
    save_run(store, _without(make_run("two-1", noise=0.01, seed=2), "optimizer", range(32)))
    overall, notes = _overall(["whole-1", "two-1"])
    assert (overall["Steps A"], overall["Steps B"]) == (30, 30)
    assert abs(overall["Δ (%)"]) < 1.5  # forward + backward on both sides (with optimizer: -14 %)
    assert notes == [
        "A (whole-1) alone times optimizer: left out of the overall step, which sums forward, backward on "
        "both sides"
    ]
    gated = runner.invoke(app, ["diff", "whole-1", "two-1", "--gate", "5"])
    assert gated.exit_code == 0, gated.output


def test_a_share_of_names_just_under_the_limit_is_not_said_as_the_limit(tmp_path: Path) -> None:
    """124 kernel names in common of 250 is 49.6%: the verdict was refused because "only 50% of kernel names
    in common (under 50%)", while the comparability line said 49.6%."""
    from kineto_data import write_trace

    def trace(path: Path, names: list[str]) -> str:
        events = []
        for i, name in enumerate(names):
            events += [
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                 "ts": 10 * i, "dur": 2, "args": {"correlation": i + 1}},
                {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 10 * i + 3, "dur": 5,
                 "args": {"stream": 7, "correlation": i + 1, "device": 0}},
            ]  # fmt: skip
        return str(write_trace(path, events))

    common = [f"k{i}" for i in range(124)]
    a = trace(tmp_path / "a.json", [*common, "a0"])
    b = trace(tmp_path / "b.json", [*common, *(f"b{i}" for i in range(125))])
    r = runner.invoke(app, ["diff", a, b, "--format", "json"])
    assert r.exit_code == 0, r.output
    diff = json.loads(r.stdout)
    assert diff["comparability"]["kernel_names_common_pct"] == pytest.approx(49.6)
    assert "only 49.6% of kernel names in common (under 50%)" in diff["verdict"]["reason"]


def test_warmup_that_leaves_no_iteration_is_refused() -> None:
    """`--warmup 6` of the diff fixtures' 6 ProfilerStep#N ranges: the figures and tables were of the whole
    captures, warm-up included, under a line that said `A 0 (…, 6 warm-up left out)`."""
    from kineto_data import trace_path

    a, b = str(trace_path("diff-control")), str(trace_path("diff-test"))
    for fmt in ("table", "json"):
        r = runner.invoke(app, ["diff", a, b, "--warmup", "6", "--format", fmt])
        assert r.exit_code == 1 and r.stdout == ""
        assert r.stderr.strip().splitlines() == [
            f"error: {a}: none of its 6 iterations (ProfilerStep#N ranges) is left after warm-up (--warmup 6)"
        ]
    kept = runner.invoke(app, ["diff", a, b, "--warmup", "5", "--format", "json"])
    assert kept.exit_code == 0 and json.loads(kept.stdout)["a"]["iterations"]["count"] == 1


def test_warmup_on_a_side_without_iterations_is_refused() -> None:
    """alexnet has no step ranges: `--warmup 2` printed the figures of the whole capture, warm-up
    included, as if two iterations had been left out, as `--iteration` on it is refused."""
    from kineto_data import trace_path

    a = str(trace_path("alexnet"))
    for fmt in ("table", "json"):
        r = runner.invoke(app, ["diff", a, a, "--warmup", "2", "--format", fmt])
        assert r.exit_code == 1 and r.stdout == ""
        assert r.stderr.strip().splitlines() == [
            f"error: --warmup 2: no iterations in {a} (no `step` or ProfilerStep#N ranges; --iteration-range "
            "NAME names a repeated NVTX range)"
        ]
    assert runner.invoke(app, ["diff", a, a, "--warmup", "0", "--format", "json"]).exit_code == 0


def test_a_gate_over_a_verdict_without_an_interval_says_it_could_not_tell(tmp_path: Path) -> None:
    """alexnet against itself with every kernel 3× longer: one GPU a side and no iterations, so the GPU busy
    verdict (+14.3%) has no interval. `--gate 5` passed without a word, where a pass whose interval reaches
    past the gate says so."""
    from kineto_data import raw_events, trace_path, write_trace

    events = [{**e, "dur": e["dur"] * 3} if e.get("cat") == "kernel" else e for e in raw_events("alexnet")]
    a, b = str(trace_path("alexnet")), str(write_trace(tmp_path / "slow.json", events))
    r = runner.invoke(app, ["diff", a, b, "--gate", "5", "--format", "csv"])
    assert r.exit_code == 0, r.output
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("warning: gate:")]
    assert line == (
        "warning: gate: passed, but the GPU busy time has no interval (fewer than 2 iterations in A and B; "
        "one device a side: no spread to judge from): a regression of 5% could not be told from the noise; "
        "give more iterations a side (a longer capture)"
    )


def test_a_gate_over_two_runs_writes_its_outcome_in_json_as_two_exports_do(
    pair: tuple[str, str], tmp_db: str
) -> None:
    """`--format json --gate`: gate_judged and gate_failed, whose truth the exit code agrees with, for two
    runs as for two exports (a script reads the document, not only the exit code)."""
    slower = make_run("slow-1", noise=0.01, seed=3)
    for s in slower.steps:
        s.phases["backward"] = int(s.phases["backward"] * 1.5)
    save_run(ResultsStore(tmp_db), slower)
    for b, gate, failed in ((pair[1], "50", False), ("slow-1", "5", True)):
        r = runner.invoke(app, ["diff", pair[0], b, "--gate", gate, "--format", "json"])
        doc = json.loads(r.stdout)
        assert r.exit_code == int(failed), r.output
        assert (doc["gate_pct"], doc["gate_judged"], doc["gate_failed"]) == (float(gate), True, failed)
    save_run(
        ResultsStore(tmp_db), RunResult("oom-1", RunConfig(model="tiny"), "oom", device="cpu", error="oom")
    )
    r = runner.invoke(app, ["diff", pair[0], "oom-1", "--gate", "5", "--format", "json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 1 and (doc["gate_judged"], doc["gate_failed"]) == (False, True)


def test_the_runs_of_a_repeats_experiment_are_found_where_a_wrong_name_points(pair: tuple[str, str]) -> None:
    """`diff repeats-…` with a name that matches no experiment points to `harness runs`, whose table had no
    experiment column: the experiments could be found in its csv and json alone."""
    r = runner.invoke(app, ["diff", "repeats-dirft", pair[0]])
    assert r.exit_code == 2 and "`harness runs` lists the experiments' runs" in r.stderr
    listed = runner.invoke(app, ["runs", "--wide"], env={"COLUMNS": "80"}).stdout
    rows = [[c.strip() for c in line.split("│")] for line in listed.splitlines() if line.startswith("│")]
    header = next(line for line in listed.splitlines() if line.startswith("┃ run"))
    column = [c.strip() for c in header.split("┃")].index("experiment")
    assert [row[column] for row in rows] == ["repeats-drift"] * 4 + ["—", "—"]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--warmup", "1"], "--warmup is"),
        (["--iteration", "0", "--by", "shape"], "--iteration, --by are"),
        (["--raw-names"], "--raw-names is"),
        (["--iteration-range", "step"], "--iteration-range is"),
    ],
)
def test_a_two_export_option_given_with_a_stored_run_is_refused(
    pair: tuple[str, str], given: list[str], said: str
) -> None:
    """--warmup, --iteration, --iteration-range, --by and --raw-names shape a diff of two exports; between
    runs (or a run and an export) they were taken and changed nothing."""
    r = runner.invoke(app, ["diff", *pair, *given])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.splitlines() == [
        f"error: {said} for two exports or traces; A and B are stored runs, whose phases are compared from "
        f"their steps: {'it changes' if ' is' in said else 'they change'} nothing"
    ]
    r = runner.invoke(app, ["diff", pair[0], str(need(CPU_TRAIN)), *given])
    assert r.exit_code == 2 and "A is a stored run" in r.stderr
    assert runner.invoke(app, ["diff", *pair, "--warmup", "0", "--top", "3"]).exit_code == 2  # given: said
    assert runner.invoke(app, ["diff", *pair, "--top", "3"]).exit_code == 0


def test_no_drift_measured_names_the_context_length_it_was_looked_for_at(tmp_db: str) -> None:
    """Two runs at context 16 after `run --repeats` at the default context: `no drift between runs measured
    for tiny train fp32 batch 4`, the very configuration whose drift had been measured, as far as it said.
    The context length is in the drift's key: it is named."""
    from dataclasses import replace

    store = ResultsStore(tmp_db)
    measure_drift(store, make_run("aa", noise=0.01, seed=5))  # at RunConfig's context length
    for run_id, seed in (("short-a", 1), ("short-b", 2)):
        run = make_run(run_id, noise=0.01, seed=seed)
        assert run.model is not None
        save_run(
            store,
            replace(
                run,
                config=replace(run.config, context_length=16),
                model=replace(run.model, context_length=16),
            ),
        )
    r = runner.invoke(app, ["diff", "short-a", "short-b"], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert "no drift between runs measured for tiny train fp32 batch 4 context 16 on " in r.stdout, r.output
    r = runner.invoke(app, ["diff", "aa-drift-0", "short-a"], env={"COLUMNS": "300"})
    assert (
        "measured for tiny train fp32 batch 4 context 64 on cpu, tiny train fp32 batch 4 context 16 on "
        in r.stdout
    )


def _program_run(store: ResultsStore, run_id: str, export: Path, returncode: int = 0) -> None:
    """A stored `harness profile -- …` run whose export is `export`."""
    prof = ProfileResult(returncode=returncode, rep=None, sqlite=export, qdstrm=None, stderr_tail="")
    result = program_result(run_id, "train.py", ["python", "train.py"], prof, "2023.4.4.54")
    save_run(store, result, profiler="nsys", nsys_mode="light", nsys_sqlite=str(export))


@pytest.fixture
def programs(tmp_db: str, tmp_path: Path) -> ResultsStore:
    """Two program runs of the CPU capture, the second with its `step` ranges 20% longer."""
    need(CPU_TRAIN)
    slow = derive(
        CPU_TRAIN,
        tmp_path / "slow.sqlite",
        "UPDATE NVTX_EVENTS SET end = start + (end - start) * 6 / 5 "
        "WHERE textId = (SELECT id FROM StringIds WHERE value = 'step')",
    )
    store = ResultsStore(tmp_db)
    _program_run(store, "train.py-1", CPU_TRAIN)
    _program_run(store, "train.py-2", slow)
    return store


def test_two_program_runs_are_compared_by_their_exports(programs: ResultsStore) -> None:
    """The harness times no steps in a program: two program runs get their exports' verdict, and a gate
    judges it (it was refused: 'no measured steps … run it again'), as two exports' does; the two-export
    options apply (the first step of this capture is a 167 ms warm-up among 16 ms steps)."""
    r = runner.invoke(app, ["diff", "train.py-1", "train.py-2", "--warmup", "3", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["a"]["label"], doc["b"]["label"]) == ("train.py-1", "train.py-2")
    assert doc["verdict"]["verdict"] == "regression" and doc["verdict"]["basis"] == "iteration time"
    r = runner.invoke(app, ["diff", "train.py-1", "train.py-2"])
    assert "no measured steps" not in r.output and "A = train.py-1" in r.stdout
    r = runner.invoke(app, ["diff", "train.py-1", "train.py-2", "--warmup", "3", "--gate", "5"])
    assert r.exit_code == 1 and "error: gate: regression beyond 5%: iteration time +" in r.stderr
    assert (
        runner.invoke(app, ["diff", "train.py-1", "train.py-2", "--warmup", "3", "--gate", "50"]).exit_code
        == 0
    )


def test_a_program_run_that_failed_is_said_and_no_gate_passes_on_it(programs: ResultsStore) -> None:
    _program_run(programs, "train.py-3", CPU_TRAIN, returncode=3)
    r = runner.invoke(app, ["diff", "train.py-1", "train.py-3"])
    assert r.exit_code == 0, r.output
    said = " ".join(line.strip() for line in r.output.splitlines())
    assert (
        "train.py-3 ended error (the program exited with code 3): what its export recorded is compared"
        in said
    )
    r = runner.invoke(app, ["diff", "train.py-1", "train.py-3", "--gate", "50"])
    assert r.exit_code == 1
    assert r.stderr.splitlines()[-1] == (
        "error: gate: train.py-3 ended error (the program exited with code 3): a gate passes only between "
        "runs that ended ok; run it again"
    )


def test_notes_of_two_exports_without_per_name_tables_are_said(
    programs: ResultsStore, tmp_path: Path
) -> None:
    """Two captures with no kernel or NVTX table: the notes go under the headline (they were dropped)."""
    bare = derive(CPU_TRAIN, tmp_path / "bare.sqlite", "DELETE FROM NVTX_EVENTS")
    _program_run(programs, "bare-1", bare)
    _program_run(programs, "bare-2", bare, returncode=3)
    r = runner.invoke(app, ["diff", "bare-1", "bare-2"])
    assert r.exit_code == 0, r.output
    said = " ".join(line.strip() for line in r.output.splitlines())
    assert (
        "note: bare-2 ended error (the program exited with code 3): what its export recorded is compared"
        in said
    )


def test_a_program_run_against_an_export_is_compared_as_two_exports(programs: ResultsStore) -> None:
    """A program run and an export: their exports' verdict, and a gate judges it (it was refused: 'a run
    and an export give no verdict')."""
    slow = programs.get("train.py-2").nsys_sqlite
    r = runner.invoke(app, ["diff", "train.py-1", slow, "--warmup", "3", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["a"]["label"], doc["b"]["label"]) == ("train.py-1", slow)
    assert doc["verdict"]["verdict"] == "regression"
    r = runner.invoke(app, ["diff", slow, "train.py-1", "--warmup", "3", "--gate", "5"])
    assert r.exit_code == 0, r.output  # an improvement


def test_a_side_that_names_one_run_twice_is_refused(tmp_db: str) -> None:
    """`A1,A2,A1` (or `-1,latest`, one run by two names) was taken as two runs without a word: the side had
    fewer runs than typed, and the interval was drawn from them. Now it is refused in one line."""
    store = ResultsStore(tmp_db)
    for seed, run_id in enumerate(("base-1", "base-2", "new-1", "new-2")):
        save_run(store, make_run(run_id, noise=0.01, seed=seed))
    r = runner.invoke(app, ["diff", "base-1,base-2,base-1", "new-1,new-2", "--gate", "5"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    said = "error: 'base-1,base-2,base-1' names run base-1 more than once: give each run once"
    assert r.stderr.strip() == said
    r = runner.invoke(app, ["diff", "base-1,base-2", "-1,latest"])
    assert r.exit_code == 2 and "names run new-2 more than once" in r.stderr
    assert runner.invoke(app, ["diff", "base-1,base-2", "new-1,new-2"]).exit_code == 0
