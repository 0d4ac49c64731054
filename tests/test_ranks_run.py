"""Runs across ranks (`harness run --nproc N`): real torchrun, real gloo ranks, real nsys, real deaths."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

import pandas as pd
import pytest
from procs import marked, output, start, wait_until
from typer.testing import CliRunner

from analysis.dashboard import DashboardData
from analysis.dashboard.ranks import COMPUTE_TRACE, WAIT_TRACE, rank_straggler_panel
from analysis.ranks.ranks import (
    communication_share,
    imbalance_table,
    per_rank,
    straggler_note,
    straggler_table,
    with_step_rows,
)
from harness.cli import app
from harness.execution.ranks.distributed import _buckets, beat_path, rank_path
from harness.execution.ranks.multirank import Watchdog
from harness.experiments.ranks import IMBALANCE, STRAGGLER, ranks_of_run
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()
PHASES = ("forward", "backward", "allreduce", "optimizer")
# the tiny model with a small batch: the ranks share this machine's cores with everything else
SMALL = ["--device", "cpu", "--steps", "3", "--warmup", "1", "--batch-size", "1", "--context-length", "32"]
PER_RANK = "phases per rank (2 ranks, mean of measured steps)"

MS = 1_000_000


def _frame(backward: float = 2.0) -> pd.DataFrame:
    """Three ranks; rank 2's backward `backward` times as long, so ranks 0 and 1 wait for it in the
    all-reduce (50 ms of transfer each, and the time rank 2 computes longer)."""
    rows = []
    for rank in (0, 1, 2):
        slow = backward if rank == 2 else 1.0
        late = int(200 * MS * (backward - 1))  # how much later rank 2 reaches the all-reduce
        for step in (1, 2):
            phases = {"forward": 100 * MS, "backward": int(200 * MS * slow),
                      "allreduce": 50 * MS + (0 if rank == 2 else late), "optimizer": 50 * MS}  # fmt: skip
            rows += [(rank, phase, step, ns) for phase, ns in phases.items()]
    return pd.DataFrame(rows, columns=["rank", "phase", "step", "duration_ns"])


def test_the_slowest_rank_in_the_allreduce_is_its_victim_not_the_straggler() -> None:
    table = imbalance_table(with_step_rows(_frame())).set_index("Phase")
    assert list(table.index) == ["forward", "backward", "allreduce", "optimizer", "step"]
    backward = table.loc["backward"]
    assert (
        backward["Slowest Rank"] == 2
        and backward["Slowest (ns)"] == 400 * MS
        and backward["Median (ns)"] == 200 * MS
    )
    assert backward["Imbalance"] == 2.0 and "Straggler" not in table.columns
    assert table.loc["allreduce", "Slowest Rank"] == 0  # waited 200 ms for rank 2: a victim
    # every rank's step: 600 ms (ranks 0 and 1 wait as long as rank 2 computes longer)
    assert table.loc["step", "Mean (ns)"] == 600 * MS
    stragglers = straggler_table(_frame()).set_index("Rank")
    assert stragglers["Compute (ns)"].tolist() == [350 * MS, 350 * MS, 550 * MS]
    assert stragglers["Wait (ns)"].tolist() == [250 * MS, 250 * MS, 50 * MS]
    assert stragglers["Straggler"].tolist() == ["-", "-", "rank 2"]
    assert stragglers.loc[2, "Costs Others (ns)"] == 200 * MS
    assert stragglers["Costs Others (ns)"].isna().sum() == 2
    assert straggler_note(straggler_table(_frame())) == (
        "straggler: rank 2 computes 200.000 ms more per step than the others and arrives last at the "
        "all-reduce: the others wait 200.000 ms per step there beyond its own wait"
    )
    balanced = straggler_table(_frame(backward=1.0))
    assert (balanced["Straggler"] == "-").all()
    assert straggler_note(balanced) == "no straggler: every rank computes within 5% of the median rank"
    assert communication_share(_frame()) == pytest.approx((250 + 250 + 50) / 3 / 600)
    means = per_rank(_frame()).set_index("rank")
    assert means.loc[2, "backward (ns)"] == 400 * MS and means.loc[0, "step (ns)"] == 600 * MS


def test_gradient_buckets_keep_order_and_limit() -> None:
    import torch

    grads = [torch.zeros(10), torch.zeros(10), torch.zeros(100), torch.zeros(5, dtype=torch.float64)]
    groups = list(_buckets(grads, limit=100))  # bytes: 40, 40, 400, 40
    assert [[g.numel() for g in group] for group in groups] == [[10, 10], [100], [5]]


def test_ranks_refuse_what_they_cannot_time(tmp_db: str) -> None:
    for args, says in (
        (["--mode", "forward", "--nproc", "2"], "train mode only"),
        (["--nproc", "0"], "--nproc and --nnodes must be 1 or more"),
        (["--nproc", "2", "--nnodes", "2"], "--rdzv-endpoint"),
        (["--nproc", "2", "--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"], "--node-rank"),
        (["--nproc", "2", "--profiler", "torch"], "--profiler torch"),
        (["--nproc", "2", "--memory"], "--memory is not supported with --nproc yet"),
        (["--delay-rank", "1:200"], "--delay-rank delays one rank of several: give --nproc 2 or more"),
        (["--nproc", "2", "--delay-rank", "2:200"], "rank 2 is not one of the 2 ranks"),
        (["--nproc", "2", "--delay-rank", "1"], "--delay-rank takes RANK:MS (e.g. 1:200), got '1'"),
        # str.isdigit takes them; int() refused the first (a traceback) and read the second as 1
        (
            ["--nproc", "2", "--delay-rank", "1:\u00b2"],
            "--delay-rank takes RANK:MS (e.g. 1:200), got '1:\u00b2'",
        ),
        (
            ["--nproc", "2", "--delay-rank", "\u0661:5"],
            "--delay-rank takes RANK:MS (e.g. 1:200), got '\u0661:5'",
        ),
    ):
        result = runner.invoke(app, ["run", "tiny", "--device", "cpu", *args])
        assert result.exit_code == 2, result.output
        assert says in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("nproc", ["1", "2"])
@pytest.mark.parametrize("timeout", ["nan", "inf", "1e400", "1e14", "0", "-1"])
def test_a_rank_timeout_no_run_could_take_is_refused_before_any_rank_starts(
    tmp_db: str, nproc: str, timeout: str
) -> None:
    """Each rank failed in init_process_group's timedelta (OverflowError, "cannot convert float NaN"), and
    a run of one process stored the value, which `harness import` refuses: refused at once, in one line."""
    result = runner.invoke(
        app, ["run", "tiny", "--device", "cpu", "--steps", "1", "--nproc", nproc, "--rank-timeout", timeout]
    )
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    if timeout == "1e400":  # past a float's range: refused as typed, as every number option is
        assert lines[-1] == "error: --rank-timeout 1e400 is out of range: at most 1.798e+308"
    else:
        assert lines[-1].startswith("error: --rank-timeout must be a positive number of seconds, at most ")
        assert lines[-1].endswith(f"got {float(timeout):g}"), lines[-1]
    assert "Traceback" not in result.output
    assert not Path(tmp_db.removeprefix("sqlite:///")).exists()  # refused before the run: nothing stored


@pytest.mark.parametrize("nproc", ["1", "2"])
def test_a_rendezvous_endpoint_with_control_characters_is_refused(tmp_db: str, nproc: str) -> None:
    """With one process it was only warned of and stored with the run as given, which `harness import`
    refuses (a run left unsaved could not be stored later); torchrun would have been handed it as is."""
    args = ["run", "tiny", "--device", "cpu", "--steps", "1", "--nproc", nproc]
    result = runner.invoke(app, [*args, "--rdzv-endpoint", "node\x1b[2J:29500"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        "error: --rdzv-endpoint 'node\\x1b[2J:29500' is not HOST:PORT: it holds control characters"
    )
    assert "\x1b" not in result.output and not Path(tmp_db.removeprefix("sqlite:///")).exists()


def test_ranks_of_a_program_run_read_its_export(tmp_db: str, h100_captures: dict[str, Path]) -> None:
    """A `harness profile` run has no in-process timers, only its export: `ranks RUN` said "has no measured
    steps" of a capture whose step ranges hold prefill and decode; it reads the export as `ranks EXPORT`."""
    from harness.core.records import RunResult
    from harness.experiments.program import program_config

    export = h100_captures["tiny-generate"]
    program = RunResult(run_id="prog-1", config=program_config("prog"), status="ok", device="n/a")
    save_run(ResultsStore(tmp_db), program, profiler="nsys", nsys_sqlite=str(export))
    by_run = runner.invoke(app, ["ranks", "prog-1", "--format", "json"])
    assert by_run.exit_code == 0, by_run.output
    by_export = runner.invoke(app, ["ranks", str(export), "--format", "json"])
    assert json.loads(by_run.stdout) == json.loads(by_export.stdout)
    doc = json.loads(by_run.stdout)
    assert not [title for title in doc if title.startswith("Imbalance")]  # one rank: compared with nothing
    assert [row["Phase"] for row in doc["Phase time per rank"]] == ["prefill", "decode", "step"]
    assert "run prog-1: its export (the run has no in-process timers)" in by_run.stderr


def test_an_older_database_gains_the_rank_columns(tmp_path: Path) -> None:
    from harness.core.records import RunConfig, RunResult, StepRecord

    db = tmp_path / "old.sqlite"
    store = ResultsStore(str(db))
    steps = [StepRecord(step=0, warmup=False, phases={"forward": 5})]
    save_run(store, RunResult(run_id="old", config=RunConfig(model="tiny"), status="ok", steps=steps))
    store.engine.dispose()
    with sqlite3.connect(db) as conn:  # as a harness from before runs across ranks left it
        conn.execute("ALTER TABLE step_timings DROP COLUMN rank")
        conn.execute("ALTER TABLE runs DROP COLUMN world_size")
        conn.execute("UPDATE harness_alembic_version SET version_num = '0006'")
    store = ResultsStore(str(db))
    timings = store.step_timings(["old"])
    assert timings["rank"].tolist() == [0] and timings["duration_ns"].tolist() == [5]
    assert store.runs()["world_size"].isna().all()


@pytest.mark.slow
def test_two_gloo_ranks(tmp_db: str) -> None:
    result = runner.invoke(app, ["run", "tiny", *SMALL, "--nproc", "2", "--format", "json"])
    assert result.exit_code == 0, result.output
    tables = json.loads(result.stdout)
    per_rank_rows = {row["rank"]: row for row in tables[PER_RANK]}
    assert sorted(per_rank_rows) == [0, 1]
    for row in per_rank_rows.values():
        assert all(row[f"{p} (ns)"] > 0 for p in PHASES)
    imbalance = {row["Phase"]: row for row in tables[IMBALANCE]}
    assert list(imbalance) == [*PHASES, "step"]
    assert imbalance["allreduce"]["Mean (ns)"] > 0 and imbalance["step"]["Imbalance"] >= 1.0
    assert imbalance["step"]["Slowest Rank"] in (0, 1)
    assert [row["Rank"] for row in tables[STRAGGLER]] == [0, 1]
    # stored once, with every step of every rank
    store = ResultsStore(tmp_db, readonly=True)
    runs = store.runs()
    assert len(runs) == 1 and runs["world_size"].tolist() == [2] and runs["status"].tolist() == ["ok"]
    steps = store.step_timings()
    assert sorted(steps.groupby("rank").size().to_dict().items()) == [(0, 16), (1, 16)]  # 4 steps × 4
    assert (steps[steps["phase"] == "allreduce"]["duration_ns"] > 0).all()
    shown = runner.invoke(app, ["show", runs["run_id"][0], "--format", "json"])
    assert shown.exit_code == 0, shown.output
    assert {row["Phase"] for row in json.loads(shown.stdout)[IMBALANCE]} == {*PHASES, "step"}
    text = runner.invoke(app, ["show", runs["run_id"][0]], env={"COLUMNS": "200"})
    assert "communication (allreduce):" in text.output and "straggler" in text.output
    # harness ranks RUN: no exports, so the timers; the same tables as `run` printed
    ranked = runner.invoke(app, ["ranks", runs["run_id"][0], "--format", "json"])
    assert ranked.exit_code == 0, ranked.output
    doc = json.loads(ranked.stdout)
    assert doc["Imbalance per phase over 2 ranks (mean per step)"] == tables[IMBALANCE]
    assert doc["Straggler: compute and wait in collectives per rank (mean per step)"] == tables[STRAGGLER]
    refused = runner.invoke(app, ["ranks", "latest", "--html", "x.html"])
    assert refused.exit_code == 1 and "run it with --nsys" in refused.output
    memory = next(rows for title, rows in tables.items() if title.startswith("memory (peak: process peak"))
    assert {row["memory"] for row in memory} >= {"peak RSS (process)", "analytic: total"}


@pytest.mark.slow
def test_a_delayed_rank_is_named_the_straggler(tmp_db: str) -> None:
    """Rank 1 sleeps 1 s in every forward: it computes that much longer, rank 0 waits for it in the
    all-reduce, and rank 1 (not rank 0, the slowest in the all-reduce) is the straggler. The sleep is long
    beside the tiny model's step (a few ms), so rank 0's own work, slowed by whatever else the machine runs
    (200 ms was overtaken at load 9 to 11 on 2 cores), does not catch up with it."""
    args = ["run", "tiny", *SMALL, "--nproc", "2", "--delay-rank", "1:1000", "--format", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    tables = json.loads(result.stdout)
    rows = {row["Rank"]: row for row in tables[STRAGGLER]}
    assert rows[0]["Straggler"] == "-" and rows[1]["Straggler"] == "rank 1"
    # not by how much: while rank 1 sleeps, rank 0 has the cores to itself, so on a busy machine the gap
    # in compute shrinks below the time slept
    assert rows[1]["Compute (ns)"] > rows[0]["Compute (ns)"] and rows[1]["Costs Others (ns)"] > 0
    waited = rows[0]["Wait (ns)"] - rows[1]["Wait (ns)"]  # rank 0's wait beyond rank 1's
    assert rows[1]["Costs Others (ns)"] == pytest.approx(waited, abs=2)
    forward = {row["rank"]: row["forward (ns)"] / MS for row in tables[PER_RANK]}
    assert forward[1] >= 1000 and forward[1] > forward[0]  # the 1 s sleep, inside every timed forward
    imbalance = {row["Phase"]: row for row in tables[IMBALANCE]}
    assert imbalance["allreduce"]["Slowest Rank"] == 0 and imbalance["forward"]["Slowest Rank"] == 1
    run = ResultsStore(tmp_db, readonly=True).runs().iloc[0]
    stored = ResultsStore(tmp_db, readonly=True).get(run["run_id"])
    assert (stored.config["delay_rank"], stored.config["delay_ms"]) == (1, 1000)
    text = runner.invoke(app, ["show", run["run_id"]], env={"COLUMNS": "80"})
    assert "straggler: rank 1 computes" in " ".join(text.stdout.split())
    # the ranks page's straggler panel draws the same figures from the stored run
    report = ranks_of_run(ResultsStore(tmp_db, readonly=True), run["run_id"])
    panel = rank_straggler_panel(DashboardData(ranks=report.phases))
    assert panel.figure is not None
    compute, wait = panel.figure.data
    assert (compute.name, wait.name) == (COMPUTE_TRACE, WAIT_TRACE)
    assert list(compute.y) == ["rank 0", "rank 1 (straggler)"]
    assert list(compute.x) == [rows[0]["Compute (ns)"] / MS, rows[1]["Compute (ns)"] / MS]
    assert list(wait.x) == [rows[0]["Wait (ns)"] / MS, rows[1]["Wait (ns)"] / MS]
    cost = rows[1]["Costs Others (ns)"] / MS
    assert panel.title == f"Straggler: rank 1 arrives last, costs the others {cost:,.3f} ms per step"


@pytest.mark.slow
@pytest.mark.nsys
def test_two_ranks_under_nsys_leave_a_report_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_db: str, nsys_bin: str
) -> None:
    from analysis.tables.nvtx import nvtx_ranges
    from analysis.trace.opening import open_trace

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_NSYS", nsys_bin)
    args = ["run", "tiny", *SMALL, "--nproc", "2", "--nsys", "--no-nsys-baseline", "--format", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    run = ResultsStore(tmp_db, readonly=True).runs().iloc[0]
    folder = tmp_path / "nsys_profiles"
    for rank in (0, 1):
        sqlite = folder / f"{run['run_id']}.rank{rank}.sqlite"
        assert (folder / f"{run['run_id']}.rank{rank}.nsys-rep").is_file() and sqlite.is_file()
        assert run["artifacts"][f"nsys_sqlite.rank{rank}"] == str(sqlite.resolve())
        ranges = nvtx_ranges(open_trace(sqlite), names=list(PHASES))
        for phase in PHASES:  # once per step, warmup included, in this rank's own report
            steps = ranges[ranges["name"] == phase]["payload"].astype(int)
            assert sorted(steps) == [0, 1, 2, 3], (rank, phase)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"{run['run_id']}.rank{r}.{ext}" for r in (0, 1) for ext in ("nsys-rep", "sqlite")
    )
    agreement = {row["Phase"] for row in json.loads(result.stdout)["NVTX vs in-process timers"]}
    assert agreement == set(PHASES)
    # harness ranks RUN reads the run's two exports; the analysis commands combine the folder
    ranked = runner.invoke(app, ["ranks", "latest", "--format", "json", "--html", "ranks.html"])
    assert ranked.exit_code == 0, ranked.output
    times = json.loads(ranked.stdout)["Phase time per rank"]
    assert {(row["Rank"], row["Phase"]) for row in times} == {(r, p) for r in (0, 1) for p in PHASES}
    assert all(row["Steps"] == 3 for row in times)  # the measured steps
    assert (tmp_path / "ranks.html").stat().st_size > 0
    nvtx = runner.invoke(app, ["nvtx", str(folder), "--format", "json"])
    assert nvtx.exit_code == 0, nvtx.output
    rows = {row["Range"]: row for row in json.loads(nvtx.stdout)}
    assert rows["forward"]["Instances"] == 8 and rows["forward"]["Ranks"] == "0-1"  # 4 steps × 2 ranks


def _failing_run(tmp_path: Path, fault: str, *extra: str) -> tuple[int, str, str]:
    mark = uuid.uuid4().hex
    db = tmp_path / "results.sqlite"
    proc = start(
        ["run", "tiny", *SMALL, "--nproc", "2", "--db", str(db), *extra],
        tmp_path,
        mark,
        HARNESS_TEST_RANK_FAULT=fault,
    )
    code = proc.wait(timeout=300)
    wait_until(lambda: not marked(mark), 30, f"no process left; left: {marked(mark)}")
    return code, output(tmp_path), str(db)


def _survivor_kept_what_it_finished(steps: set[int]) -> bool:
    """Rank 0's kept steps when rank 1 failed at step 2's forward. Rank 1 got through step 1's all-reduce,
    so rank 0 had finished step 0; how far rank 0 got past that before torchrun stopped it depends on the
    machine's load (step 1's optimizer, step 2 up to its all-reduce), so only step 0 is certain."""
    return 0 in steps and steps <= {0, 1, 2}


@pytest.mark.slow
def test_a_killed_rank_fails_the_run_and_leaves_nothing(tmp_path: Path) -> None:
    code, text, db = _failing_run(tmp_path, "1:2:kill")
    assert code == 1, text
    assert "rank 1: worker killed by SIGKILL" in text and "Traceback" not in text
    store = ResultsStore(db, readonly=True)
    run = store.runs().iloc[0]
    assert run["status"] == "error"
    stored = store.get(run["run_id"])
    assert stored.error.startswith("rank 1: worker killed by SIGKILL")
    assert stored.summary["failed_rank"] == 1
    # what rank 1 measured before it died is kept (warmup step 0, measured step 1), and rank 0's steps
    ranks = store.step_timings().groupby("rank")["step"].agg(set).to_dict()
    assert ranks[1] == {0, 1} and _survivor_kept_what_it_finished(ranks[0])


@pytest.mark.slow
def test_a_rank_that_raises_keeps_the_steps_it_finished(tmp_path: Path) -> None:
    # a Python exception in a rank (as gloo raises in the survivor when its peer dies) is stored as the
    # failure, with the steps both ranks finished before it
    code, text, db = _failing_run(tmp_path, "1:2:raise")
    assert code == 1, text
    store = ResultsStore(db, readonly=True)
    stored = store.get(store.runs().iloc[0]["run_id"])
    assert stored.status == "error" and stored.summary["failed_rank"] == 1
    assert stored.error == "rank 1: RuntimeError: injected fault at step 2", stored.error
    ranks = store.step_timings().groupby("rank")["step"].agg(set).to_dict()
    assert ranks[1] == {0, 1} and _survivor_kept_what_it_finished(ranks[0])


def test_the_watchdog_names_the_rank_quiet_in_its_own_phase_not_the_one_waiting_for_it(
    tmp_path: Path,
) -> None:
    """Rank 1 hangs in step 2's forward; rank 0 waits for it in step 2's all-reduce. Under load rank 1 can
    begin its step after rank 0 reached the all-reduce: its heartbeat is the newer one, and the rank quiet
    longest was rank 0, the one waiting."""
    import os
    import time

    result = tmp_path / "result.json"
    now = time.time()
    for rank, line, age in ((0, "2 allreduce", 20), (1, "2 forward", 10)):
        beat = beat_path(rank_path(result, rank))
        beat.write_text(f"1 forward\n{line}\n")
        os.utime(beat, (now - age, now - age))
    dog = Watchdog(result, [0, 1], timeout=5)
    assert dog()
    assert (dog.hung, dog.last_phase) == (1, "2 forward")
    assert "rank 1 started no phase for 5 s (--rank-timeout) (hung in step 2, forward)" in dog.error()


@pytest.mark.slow
def test_a_hung_rank_is_stopped_after_the_rank_timeout(tmp_path: Path) -> None:
    code, text, db = _failing_run(tmp_path, "1:2:hang", "--rank-timeout", "5")
    assert code == 1, text
    assert "rank 1 started no phase for 5 s (--rank-timeout) (hung in step 2, forward)" in text
    run = ResultsStore(db, readonly=True).runs().iloc[0]
    assert run["status"] == "error"


@pytest.mark.slow
def test_sweep_across_ranks(tmp_db: str) -> None:
    args = ["sweep", "--models", "tiny", *SMALL, "--steps", "2", "--nproc", "2", "--format", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    store = ResultsStore(tmp_db, readonly=True)
    assert store.runs()["world_size"].tolist() == [2]
    steps = store.step_timings()
    assert set(steps["rank"]) == {0, 1} and "allreduce" in set(steps["phase"])


@pytest.mark.slow
@pytest.mark.nsys
def test_overhead_across_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_db: str, nsys_bin: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_NSYS", nsys_bin)
    args = ["overhead", "tiny", *SMALL, "--steps", "2", "--repeats", "1", "--nproc", "2", "--format", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = {row["Phase"]: row for row in json.loads(result.stdout)}
    assert list(rows) == [*PHASES, "step (sum)"]
    # a whole step is one rank's phases summed: not two ranks' (the sum of the phase means)
    phase_sum = sum(rows[p]["no nsys Avg (ns)"] for p in PHASES)
    assert rows["step (sum)"]["no nsys Avg (ns)"] == pytest.approx(phase_sum)
    store = ResultsStore(tmp_db, readonly=True)
    runs = store.runs()
    assert sorted(runs["profiler"]) == ["none", "nsys"] and runs["world_size"].tolist() == [2, 2]
    counts = store.step_timings().groupby(["run_id", "rank"]).size()
    assert len(counts) == 4 and set(counts) == {12}  # 3 steps × 4 phases, per run and rank


def test_a_rank_killed_by_a_signal_is_named_before_the_ranks_its_death_broke(tmp_path: Path) -> None:
    import signal

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from harness.execution.ranks.rank_launcher import _first

    missing = str(tmp_path / "no-error-file.json")  # as a killed rank leaves: stamped when seen
    broken = ProcessFailure(local_rank=0, pid=100, exitcode=1, error_file=missing)
    killed = ProcessFailure(local_rank=1, pid=101, exitcode=-signal.SIGKILL, error_file=missing)
    killed.timestamp = broken.timestamp  # seen in the same poll
    assert _first(ChildFailedError("worker", {0: broken, 1: killed})) == 1
    assert _first(ChildFailedError("worker", {0: broken})) == 0
    # Once rank 1 has died, torchrun ends the others with SIGTERM and lists them as failed too. Under load
    # rank 0 has often seen its all-reduce fail by then, written its result and is exiting: it dies of that
    # SIGTERM, stamped in the same second. What a loaded machine gave (rank 1 seen first, then rank 0):
    ended = ProcessFailure(local_rank=0, pid=100, exitcode=-signal.SIGTERM, error_file=missing)
    ended.timestamp = killed.timestamp
    assert _first(ChildFailedError("worker", {1: killed, 0: ended})) == 1
    assert _first(ChildFailedError("worker", {0: ended, 1: killed})) == 1
    exited = ProcessFailure(local_rank=1, pid=101, exitcode=3, error_file=missing)
    exited.timestamp = ended.timestamp
    assert _first(ChildFailedError("worker", {0: ended, 1: exited})) == 1  # its exit code is the cause
    assert _first(ChildFailedError("worker", {0: ended})) == 0  # a SIGTERM from outside, nothing else


def test_a_straggler_that_computes_less_than_the_others_is_not_said_to_compute_more() -> None:
    """Rank 0 computes 20 ms less per step than rank 1 but waits 40 ms less in the all-reduce: it arrives
    last, and the note says it computes less, not "-20 ms more"."""
    rows = [
        (rank, phase, step, ns)
        for step in (1, 2)
        for rank, phases in (
            (0, {"forward": 10 * MS, "allreduce": 0}),
            (1, {"forward": 30 * MS, "allreduce": 40 * MS}),
        )
        for phase, ns in phases.items()
    ]
    table = straggler_table(pd.DataFrame(rows, columns=["rank", "phase", "step", "duration_ns"]))
    assert table["Straggler"].tolist() == ["rank 0", "-"]
    assert straggler_note(table) == (
        "straggler: rank 0 computes 20.000 ms less per step than the others yet arrives last at the "
        "all-reduce: the others wait 40.000 ms per step there beyond its own wait"
    )


def test_a_rank_out_of_memory_is_a_result_as_with_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank out of memory: the run is stored as oom, said in a warning, and the command exits 0, as a
    one-process run out of memory does (it exited 1 with `failed`)."""
    from harness.core.records import RunResult
    from harness.profilers import none

    def oom(config, on_steps=None):  # type: ignore[no-untyped-def]
        error = "rank 1: CUDA out of memory. Tried to allocate 2.00 GiB"
        return RunResult("r-oom", config, "oom", device="cpu", device_name="cpu", error=error)

    monkeypatch.setattr(none, "run_ranks", oom)
    db = tmp_path / "results.sqlite"
    result = runner.invoke(app, ["run", "tiny", *SMALL, "--nproc", "2", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "warning: out of memory: rank 1: CUDA out of memory" in result.stderr
    assert "error" not in result.stderr and "Traceback" not in result.output
    assert list(ResultsStore(str(db), readonly=True).runs()["status"]) == ["oom"]


@pytest.mark.slow
def test_a_rank_out_of_memory_for_real_exits_0(tmp_path: Path) -> None:
    """The CPU allocator refuses an embedding of 10**12 rows in both ranks (torchrun, gloo): stored as oom."""
    db = tmp_path / "results.sqlite"
    args = ["run", "char", "--device", "cpu", "--nproc", "2", "--steps", "1", "--warmup", "0"]
    result = runner.invoke(app, [*args, "--vocab-size", str(10**12), "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "warning: out of memory: rank " in result.stderr and "can't allocate memory" in result.stderr
    assert list(ResultsStore(str(db), readonly=True).runs()["status"]) == ["oom"]


def test_ranks_of_a_generate_run_says_nothing_of_communication_and_names_its_export(
    tmp_db: str, tmp_path: Path
) -> None:
    """A generate run under nsys in one process: ranks said "communication (allreduce): 0.0% of the step"
    (a generate step has no all-reduce) and "GPU busy time needs --nsys" of a run made with it."""
    from harness.core.records import RunConfig, RunResult, StepRecord

    export = tmp_path / "gen.sqlite"
    export.write_bytes(b"")
    config = RunConfig("tiny", mode="generate", warmup=0, steps=2, new_tokens=3)
    steps = [
        StepRecord(i, False, {"prefill": 1_000_000, "decode": 2_000_000}, tokens=[10, 10]) for i in range(2)
    ]
    store = ResultsStore(tmp_db)
    save_run(
        store,
        RunResult("tiny-gen", config, "ok", device="cpu", steps=steps),
        profiler="nsys",
        nsys_sqlite=str(export),
    )
    report = ranks_of_run(store, "tiny-gen")
    notes = report.notes
    assert report.imbalance.empty and report.stragglers.empty  # one process: one rank, compared with none
    assert (
        "imbalance and the straggler need two or more ranks, and there is one (rank 0): its own times only"
        in notes
    )
    assert notes[0] == (
        "run tiny-gen: in-process timers from the results database "
        f"(its GPU busy time: `harness ranks {export}`)"
    )
    assert not any("communication" in n for n in notes)
    export.unlink()  # gone: the run's timers only, as before
    assert ranks_of_run(store, "tiny-gen").notes[0].endswith("(GPU busy time needs --nsys)")


def test_a_run_across_ranks_keeps_the_memory_of_its_largest_rank(tmp_db: str) -> None:
    """Every rank records its memory (peak, analytic breakdown); the run keeps one summary: each peak the
    largest rank's, the breakdown (the same model on every rank) once, shown by `show` as for one process."""
    from harness.core.records import RunConfig, RunResult, StepRecord
    from harness.execution.ranks.multirank import Launched, combine

    config = RunConfig(model="char", device="cpu", warmup=0, steps=1, nproc=2)
    source = "process peak resident set (no allocator statistics on the CPU)"
    ranks = {}
    for rank, rss in ((0, 300 * 2**20), (1, 500 * 2**20)):
        steps = [StepRecord(0, False, {"forward": 100, "allreduce": 10}, rank=rank)]
        extra = {"memory": {"peak_rss_bytes": rss, "peak_source": source, "breakdown": {"total": 2**20}}}
        ranks[rank] = RunResult(run_id="char-ranks", config=config, status="ok", device="cpu", steps=steps,
                                peak_memory_bytes=rss, extra=extra)  # fmt: skip
    result = combine(config, "char-ranks", Launched(ranks, 0, ""))
    assert result.extra["memory"]["peak_rss_bytes"] == 500 * 2**20
    assert result.extra["memory"]["breakdown"] == {"total": 2**20}
    save_run(ResultsStore(tmp_db), result)
    shown = runner.invoke(app, ["show", "char-ranks", "--format", "json"])
    assert shown.exit_code == 0, shown.output
    title = f"memory (peak: {source}, the largest of 2 ranks)"
    rows = {row["memory"]: row["MiB"] for row in json.loads(shown.stdout)[title]}
    assert rows["peak RSS (process)"] == 500 and rows["analytic: total"] == 1
