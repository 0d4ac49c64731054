"""The commands that run work, attacked as a new user would on a machine without a GPU: each fault found,
kept found."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.core.records import RunConfig
from harness.execution import worker

# a worker that prints far more than is kept of its output, then dies
LOUD = "import sys\nfor i in range(40000): print(f'line {i} ' + 'x' * 90, file=sys.stderr)\nsys.exit(3)"
pytestmark = pytest.mark.attack(saves=True)

NOT_STORED = "not stored (its file is named on its own line)"  # where a run the database would not take is


def test_a_dying_workers_long_output_says_what_was_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain worker's error quoted the end of its output as if it were all of it: the bytes before the
    supervisor's kept end, and those before the tail quoted, were left out without a word."""

    def loud(config_path: Path, result_path: Path, entry: str = worker.ENTRY) -> list[str]:
        return [sys.executable, "-c", LOUD]

    monkeypatch.setattr(worker, "worker_command", loud)
    result = worker.run_isolated(RunConfig(model="char", warmup=0, steps=1))
    assert result.status == "error"
    head, _, tail = result.error.partition("\n")
    printed = sum(len(f"line {i} ") + 91 for i in range(40000))
    quoted = len(tail.encode()) + 1
    assert head == (
        f"worker exit code 3: the end of its output ({printed - quoted:,} of its {printed:,} bytes before "
        "it left out):"
    )
    assert tail.startswith("line ") and tail.endswith("line 39999 " + "x" * 90)
    assert len(tail) <= worker.STDERR_TAIL


def _finish(
    capsys: pytest.CaptureFixture[str], refused: list, results: list, **how: object
) -> tuple[int, str]:
    import typer

    from harness.cli import render

    with pytest.raises(typer.Exit) as ended:
        render.finish(refused, results, **how)
    return ended.value.exit_code, " ".join(capsys.readouterr().err.split())


def _refusal(line: str, run_id: str) -> object:
    """What the store raises when the database will not take run `run_id`, `line` its message."""
    from harness.store.results import UnsavedRun

    return UnsavedRun(line, Path("/tmp/u.json"), run_id=run_id, reason="locked")


def test_an_interrupted_run_the_database_would_not_take_is_not_said_stored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run that was interrupted, and that the database would not take, was said "stored as interrupted"
    right under the line saying it is not in the database but in a file."""
    from harness.core.records import RunResult

    error = "interrupted by SIGTERM after 1 of 3 measured steps"
    result = RunResult("r-1", RunConfig(model="char"), "interrupted", error=error)
    line = "run r-1 is not in the results database: locked. It was written to /tmp/u.json; `harness import`"
    code, said = _finish(capsys, [_refusal(line, "r-1")], [result])
    assert code == 143 and "stored as" not in said
    assert said.endswith(f"error: run r-1 {error}; {NOT_STORED}")
    stored = RunResult("r-2", RunConfig(model="char"), "interrupted", error=error)
    assert _finish(capsys, [_refusal(line, "r-1")], [stored])[1].endswith(
        f"error: run r-2 {error}; stored as interrupted"
    )


def test_optimize_of_an_export_refuses_db_given_on_its_command_line(tmp_path: Path) -> None:
    """`optimize EXPORT --db X` was accepted and X ignored: an export's findings are read from it, and
    nothing is stored. HARNESS_DB in the environment is no such request and is let be."""
    from test_diff import CPU_TRAIN
    from typer.testing import CliRunner

    from harness.cli import app

    db = tmp_path / "runs.db"
    r = CliRunner().invoke(app, ["optimize", str(CPU_TRAIN), "--db", str(db)])
    assert r.exit_code == 2, r.output
    said = "--db: a file's findings are read from the file, and nothing is stored: leave --db out"
    assert said in " ".join(r.output.split())
    assert "Traceback" not in r.output and not db.exists()
    r = CliRunner().invoke(app, ["optimize", str(CPU_TRAIN), "--format", "json"], env={"HARNESS_DB": str(db)})
    assert r.exit_code == 0 and "not applied" in r.output, r.output


@pytest.mark.slow
def test_profile_keeps_the_programs_output_in_a_file_beside_its_report(
    tmp_path: Path, tmp_db: str, nsys_bin: str
) -> None:
    """`profile -- CMD` captured the program's output and showed none of it (unless it failed), then said
    "its first N bytes were dropped, its end kept" of an end kept nowhere a user could read it."""
    import os
    import subprocess

    loud = "for i in range(40000): print(f'line {i} ' + 'y' * 40)"
    prof_dir = tmp_path / "profiles"
    cmd = [sys.executable, "-m", "harness", "profile", "--profile-dir", str(prof_dir), "--db", tmp_db, "--",
           sys.executable, "-c", loud]  # fmt: skip
    env = {**os.environ, "HARNESS_NSYS": nsys_bin, "COLUMNS": "400"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (log,) = prof_dir.glob("*.log")
    text = log.read_text()
    assert "line 39999 " + "y" * 40 + "\n" in text and "line 0 " not in text
    said = " ".join(done.stderr.split())
    assert f"note: output: {log}" in said
    assert f"bytes were dropped, its end kept in {log}" in said


def test_the_kept_output_holds_a_progress_bar_as_the_terminal_showed_it(tmp_path: Path) -> None:
    """The .log beside a `profile -- CMD` report kept every rewrite of nsys's carriage-return progress bars
    (a hundred states of each on one line) where a terminal shows the last."""
    from harness.execution.nsys import ProfileResult
    from harness.experiments.program import ProgramRun, _keep_output

    bar = "".join(f"\r[1/2] [{'=' * (p // 4)}{p}%] r.nsys-rep" for p in range(0, 101, 10))
    output = f"step 10\rstep 9\rdone\nGenerating '/tmp/r.qdstrm'\n{bar}\nGenerated:\r\n    r.nsys-rep\n"
    out = ProgramRun(run_id="p", result=None, profile=ProfileResult(0, None, None, None, "", output=output))
    _keep_output(out, tmp_path / "p.log")
    assert out.log == tmp_path / "p.log"
    assert out.log.read_text().splitlines() == [
        "done 90", "Generating '/tmp/r.qdstrm'", "[1/2] [=========================100%] r.nsys-rep",
        "Generated:", "    r.nsys-rep",
    ]  # fmt: skip


@pytest.mark.parametrize(("sig", "code"), [(2, 130), (15, 143)])
def test_attention_stopped_part_way_shows_the_cells_it_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: int, code: int
) -> None:
    """Ctrl-C during `attention` ended it with exit 130 and not a word, its finished cells (stored) never
    shown; SIGTERM killed it outright, unsaid. Now: the cells measured, one line, the signal's code."""
    import json

    from typer.testing import CliRunner

    from harness.cli import app
    from harness.core import signals
    from harness.experiments import attention
    from harness.store.results import ResultsStore

    measure = attention._run_cell
    ran: list[int] = []

    def run_cell(config, device, cell) -> None:  # type: ignore[no-untyped-def]
        if len(ran) == 2:  # the third cell: the signal comes as it runs
            raise signals.raised(sig)
        ran.append(cell.seq_len)
        measure(config, device, cell)

    monkeypatch.setattr(attention, "_run_cell", run_cell)
    db = f"sqlite:///{tmp_path}/a.sqlite"
    args = ["attention", "--device", "cpu", "--head-dims", "8", "--seq-lens", "8,16,32", "--batch", "1",
            "--warmup", "0", "--trials", "1", "--impl", "math", "--db", db, "--format", "json"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == code, r.output
    assert [row["seq_len"] for row in json.loads(r.stdout)] == [8, 16]
    name = signals.name(sig)
    assert f"interrupted by {name} after 2 of 3 cells; the 2 measured are stored" in " ".join(
        r.stderr.split()
    )
    assert len(ResultsStore(db).attention_results()) == 2


def test_a_failed_run_across_ranks_the_database_would_not_take_is_not_said_stored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`run --nproc 2` that failed said "stored as error" right above the line saying the database would
    not take it (it is in a file)."""
    import typer

    from harness.cli import render
    from harness.core.records import RunResult
    from harness.profilers.none import PlainRun

    result = RunResult("r-1", RunConfig(model="char", nproc=2), "error", error="rank 1: worker exit code 1")
    line = "run r-1 is not in the results database: locked. It was written to /tmp/u.json; `harness import`"
    with pytest.raises(typer.Exit) as ended:
        render.render(PlainRun("r-1", result, refused=[_refusal(line, "r-1")]), "table")  # type: ignore[list-item]
    said = " ".join(capsys.readouterr().err.split())
    assert ended.value.exit_code == 1 and "stored as" not in said
    assert "run r-1 failed: rank 1: worker exit code 1; " + NOT_STORED in said


@pytest.mark.parametrize(("sig", "code"), [(2, 130), (15, 143)])
def test_a_sweep_stopped_between_points_shows_those_it_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: int, code: int
) -> None:
    """A signal that came as a sweep started its next point (its worker's files written, before the
    supervisor passes signals on) ended the sweep through typer: exit 130 for SIGTERM too, not a word, the
    points already run (stored) never shown."""
    import json

    from typer.testing import CliRunner

    from harness.cli import app
    from harness.core import signals
    from harness.core.records import RunResult, StepRecord
    from harness.execution.ranks import multirank
    from harness.store.results import ResultsStore

    made: list[str] = []

    def run_any(config: RunConfig) -> RunResult:
        if made:
            raise signals.raised(sig)
        made.append(f"p-{config.batch_size}")
        steps = [StepRecord(0, False, {"forward": 100, "backward": 200, "optimizer": 50})]
        return RunResult(made[-1], config, "ok", device="cpu", device_name="cpu", steps=steps)

    monkeypatch.setattr(multirank, "run_any", run_any)
    db = f"sqlite:///{tmp_path}/s.sqlite"
    args = ["sweep", "--models", "char", "--batch-sizes", "1,2", "--device", "cpu", "--steps", "1",
            "--warmup", "0", "--db", db, "--format", "json"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == code, r.output
    assert [row["batch"] for row in json.loads(r.stdout)] == [1]
    said = " ".join(r.stderr.split())
    name = signals.name(sig)
    assert f"sweep interrupted by {name} between points, after 1 of 2; the 1 run is stored" in said
    assert list(ResultsStore(db).runs()["run_id"]) == ["p-1"]


def test_a_sweep_point_finished_as_the_signal_came_is_still_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal that came after a point's worker ended, before its save began, lost that point."""
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.cli import run as run_cli
    from harness.core import signals
    from harness.core.records import RunResult, StepRecord
    from harness.execution.ranks import multirank
    from harness.store.results import ResultsStore

    def run_any(config: RunConfig) -> RunResult:
        steps = [StepRecord(0, False, {"forward": 100, "backward": 200, "optimizer": 50})]
        return RunResult(f"p-{config.batch_size}", config, "ok", device="cpu", device_name="cpu", steps=steps)

    save, calls = run_cli._save, []

    def late(*args, **how):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 1:
            raise signals.raised(15)
        return save(*args, **how)

    monkeypatch.setattr(multirank, "run_any", run_any)
    monkeypatch.setattr(run_cli, "_save", late)
    db = f"sqlite:///{tmp_path}/s.sqlite"
    args = ["sweep", "--models", "char", "--batch-sizes", "1,2", "--device", "cpu", "--steps", "1",
            "--warmup", "0", "--db", db]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 143, r.output
    assert list(ResultsStore(db).runs()["run_id"]) == ["p-1"]


def test_a_sweep_point_stopped_by_ctrl_c_is_not_counted_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The point a Ctrl-C stopped is stored (as interrupted), but the progress counted it among those done:
    "2/2 runs" where one ran."""
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.core.records import RunResult, StepRecord
    from harness.execution.ranks import multirank
    from harness.store.results import ResultsStore

    def run_any(config: RunConfig) -> RunResult:  # the second point stopped by Ctrl-C, as its worker ends it
        if config.batch_size == 2:
            error = "interrupted by SIGINT after 0 of 1 measured steps"
            return RunResult("p-2", config, "interrupted", device="cpu", error=error)
        steps = [StepRecord(0, False, {"forward": 100, "backward": 200, "optimizer": 50})]
        return RunResult("p-1", config, "ok", device="cpu", device_name="cpu", steps=steps)

    monkeypatch.setattr(multirank, "run_any", run_any)
    db = f"sqlite:///{tmp_path}/s.sqlite"
    args = ["sweep", "--models", "char", "--batch-sizes", "1,2", "--device", "cpu", "--steps", "1",
            "--warmup", "0", "--db", db]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 130, r.output
    assert list(ResultsStore(db).runs()["status"]) == ["ok", "interrupted"]
    assert "1/2 runs" in r.stderr and "2/2 runs" not in r.stderr


@pytest.mark.parametrize("late", [False, True])
def test_run_repeats_stopped_between_runs_shows_and_keeps_those_it_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, late: bool
) -> None:
    """A SIGTERM between two of `run --repeats`' runs (outside their workers) ended it through typer: exit
    130, unsaid, no table; one that came as a finished run was about to be stored lost that run."""
    import json

    from typer.testing import CliRunner

    from harness.cli import app
    from harness.core import signals
    from harness.core.records import RunResult, StepRecord
    from harness.experiments import drift
    from harness.store.results import ResultsStore

    made: list[str] = []

    def run(config: RunConfig) -> tuple[RunResult, None]:
        if len(made) == 2 and not late:
            raise signals.raised(15)
        made.append(f"r-{len(made)}")
        steps = [StepRecord(0, False, {"forward": 100, "backward": 200, "optimizer": 50})]
        return RunResult(made[-1], config, "ok", device="cpu", device_name="cpu", steps=steps), None

    monkeypatch.setattr(drift, "run_baseline", run)
    db = f"sqlite:///{tmp_path}/r.sqlite"
    save = ResultsStore.save

    def save_late(self, result, **how):  # type: ignore[no-untyped-def]
        if late and result.run_id == "r-1" and not getattr(save_late, "done", False):
            save_late.done = True  # type: ignore[attr-defined]
            raise signals.raised(15)  # as the save began
        return save(self, result, **how)

    monkeypatch.setattr(ResultsStore, "save", save_late)
    args = ["run", "char", "--device", "cpu", "--repeats", "3", "--steps", "1", "--warmup", "0", "--db", db,
            "--format", "json"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 143, r.output
    (runs, _) = json.loads(r.stdout).values()
    assert [row["status"] for row in runs] == ["ok", "ok"]
    assert sorted(ResultsStore(db).runs()["run_id"]) == ["r-0", "r-1"]
    said = " ".join(r.stderr.split())
    assert "interrupted by SIGTERM between runs, after 2 of 3; the 2 runs are stored" in said


def test_an_interrupted_baseline_the_database_would_not_take_is_not_said_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nsys_bin: str
) -> None:
    """`run --nsys` stopped in its baseline run said "stored as interrupted" of a baseline the database
    would not take (its line, naming the file, came right after)."""
    from harness.core.records import RunResult
    from harness.profilers import nsys as nsys_profiler
    from harness.profilers.nsys import NsysOptions, profile_run
    from harness.store.results import ResultsStore, UnsavedRun

    error = "interrupted by SIGINT after 1 of 3 measured steps"

    def baseline(config: RunConfig) -> tuple[RunResult, None]:
        return RunResult("b-1", config, "interrupted", device="cpu", error=error), None

    def refuse(self, result, **how):  # type: ignore[no-untyped-def]
        raise UnsavedRun(
            f"run {result.run_id} is not in the results database: locked", tmp_path / "u.json",
            run_id=result.run_id, reason="locked",
        )  # fmt: skip

    monkeypatch.setattr(nsys_profiler, "run_baseline", baseline)
    monkeypatch.setattr(ResultsStore, "save", refuse)
    options = NsysOptions(profile_dir=tmp_path / "profiles")
    out = profile_run(
        RunConfig(model="char", device="cpu"), options, store=ResultsStore(f"sqlite:///{tmp_path}/r.db")
    )
    assert out.unsaved == ["run b-1 is not in the results database: locked"]
    assert out.error == f"baseline run b-1 without nsys {error}; {NOT_STORED}"
    assert out.exit_code == 130


def test_an_interrupted_profiled_run_the_database_would_not_take_is_not_said_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nsys_bin: str
) -> None:
    """`run --nsys` and `run --profiler torch` stopped part way said "stored as interrupted" (written before
    the save) of a run the database would not take."""
    from harness.core.records import RunResult
    from harness.execution.nsys import ProfileResult
    from harness.profilers import nsys as nsys_profiler
    from harness.profilers import torch as torch_profiler
    from harness.store.results import ResultsStore, UnsavedRun

    error = "interrupted by SIGTERM after 1 of 3 measured steps"

    def stopped(config: RunConfig, run_id: str, *args, **kwargs) -> RunResult:  # type: ignore[no-untyped-def]
        return RunResult(run_id, config, "interrupted", device="cpu", error=error)

    def launch(config, options, info, run_id, progress=None):  # type: ignore[no-untyped-def]
        return stopped(config, run_id), ProfileResult(143, None, None, None, "", interrupted=15), []

    def refuse(self, result, **how):  # type: ignore[no-untyped-def]
        raise UnsavedRun(
            f"run {result.run_id} is not in the results database: locked", tmp_path / "u.json",
            run_id=result.run_id, reason="locked",
        )  # fmt: skip

    monkeypatch.setattr(nsys_profiler, "launch", launch)
    monkeypatch.setattr(torch_profiler, "run_isolated", stopped)
    monkeypatch.setattr(ResultsStore, "save", refuse)
    store = ResultsStore(f"sqlite:///{tmp_path}/r.db")
    config = RunConfig(model="char", device="cpu")
    nsys_options = nsys_profiler.NsysOptions(profile_dir=tmp_path / "profiles", baseline=False)
    torch_options = torch_profiler.TorchOptions(profile_dir=tmp_path / "traces")
    for out in (
        nsys_profiler.profile_run(config, nsys_options, store=store),
        torch_profiler.profile_run(config, torch_options, store=store),
    ):
        assert out.unsaved == [f"run {out.run_id} is not in the results database: locked"]
        assert out.error is not None and "stored as" not in out.error
        assert out.error.startswith(f"run {out.run_id} {error}; {NOT_STORED}")


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_run_nsys_csv_and_json_name_the_report_and_export(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fmt: str
) -> None:
    """`run --nsys` named its report and export on the table only: csv and json left the files out (the
    torch profiler's carry its trace as a `files` table)."""
    from harness.cli.render import render_profiled
    from harness.execution.nsys import ProfileResult
    from harness.profilers.nsys import ProfiledRun

    rep, sqlite = tmp_path / "r.nsys-rep", tmp_path / "r.sqlite"
    prof = ProfileResult(0, rep, sqlite, None, "")
    render_profiled(ProfiledRun(run_id="r", result=None, profile=prof), fmt)
    out = capsys.readouterr().out
    if fmt == "json":
        import json

        assert json.loads(out)["files"] == [
            {"kind": "report", "path": str(rep)},
            {"kind": "export", "path": str(sqlite)},
        ]
    else:
        assert f"# files\nkind,path\nreport,{rep}\nexport,{sqlite}\n" in out


# a worker that ignores Ctrl-C: the second one makes the supervisor kill it
# a worker that ignores Ctrl-C; it touches the file it is given once it does
DEAF = (
    "import pathlib, signal, sys, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "pathlib.Path(sys.argv[1]).touch()\ntime.sleep(60)"
)


def test_a_worker_killed_after_ctrl_c_twice_is_not_blamed_on_the_out_of_memory_killer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Ctrl-C twice kills the worker with SIGKILL; its run said "worker killed by SIGKILL (often the kernel's
    out-of-memory killer)" and, naming no signal of the user's, ended 130 whichever signal came."""
    import os
    import signal
    import threading
    import time

    deaf_now = tmp_path / "deaf"

    def deaf(config_path: Path, result_path: Path, entry: str = worker.ENTRY) -> list[str]:
        return [sys.executable, "-c", DEAF, str(deaf_now)]

    def ctrl_c_twice() -> None:
        for _ in range(1200):
            if deaf_now.exists():
                break
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(worker, "worker_command", deaf)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    user = threading.Thread(target=ctrl_c_twice, daemon=True)
    try:
        user.start()
        result = worker.run_isolated(RunConfig(model="char", warmup=0, steps=1))
    finally:
        user.join()
        signal.signal(signal.SIGINT, previous)
    assert result.status == "interrupted"
    assert "out-of-memory" not in (result.error or "")
    assert result.error == (
        "interrupted by SIGINT before the first step; the worker was killed by SIGKILL before it wrote its "
        "result"
    )


def test_optimize_of_a_misspelt_model_names_the_models(tmp_path: Path) -> None:
    """`optimize tinny` said only "no run with id 'tinny'": a misspelt model read as a run reference, the
    models never named (a missing file's line names them)."""
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.store.results import ResultsStore

    db = f"sqlite:///{tmp_path}/r.db"
    ResultsStore(db)  # an empty database
    r = CliRunner().invoke(app, ["optimize", "tinny", "--db", db])
    assert r.exit_code == 2, r.output
    said = " ".join(r.output.split())
    assert (
        "error: no run with id 'tinny'; `harness runs` lists the runs (and it is not one of the models: tiny,"
        in said
    )


def test_attention_stops_showing_its_cells_when_the_database_will_not_take_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database that would not take a cell part way (locked past HARNESS_DB_TIMEOUT) ended `attention` with
    the database's line alone: the cell just measured was lost, unshown. Now the sweep stops there, shows
    every cell measured and says which are stored."""
    import json

    from typer.testing import CliRunner

    from harness.cli import app
    from harness.core.errors import HarnessError
    from harness.store.results import ResultsStore

    save = ResultsStore.save_attention

    def refuse_third(self, sweep, cell) -> None:  # type: ignore[no-untyped-def]
        if len(sweep.cells) == 3:
            raise HarnessError(
                f"results database {tmp_path}/a.sqlite is locked by another process (waited 3 s)"
            )
        save(self, sweep, cell)

    monkeypatch.setattr(ResultsStore, "save_attention", refuse_third)
    db = f"sqlite:///{tmp_path}/a.sqlite"
    args = ["attention", "--device", "cpu", "--head-dims", "8", "--seq-lens", "8,16,32,64", "--batch", "1",
            "--warmup", "0", "--trials", "1", "--impl", "math", "--db", db, "--format", "json"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 1, r.output
    assert [row["seq_len"] for row in json.loads(r.stdout)] == [8, 16, 32]
    said = " ".join(r.stderr.split())
    assert (
        "stopped after 3 of 4 cells: the results database would not take the last (math head_dim 8 seq_len "
        f"32): results database {tmp_path}/a.sqlite is locked by another process (waited 3 s); the 2 before "
        "it are stored, every cell measured is shown"
    ) in said
    assert said.count("error:") == 1
    assert len(ResultsStore(db).attention_results()) == 2


def test_a_sweep_whose_first_point_was_killed_names_the_device_of_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A point whose worker was killed before it named its device: the title names the device of a point
    that says it, never an empty `()`; of a lone killed run it names none."""
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.core.records import RunResult, StepRecord
    from harness.execution.ranks import multirank

    def run_any(config: RunConfig) -> RunResult:
        steps = [StepRecord(0, False, {"forward": 100, "backward": 200, "optimizer": 50})]
        if config.batch_size == 1:  # killed: steps logged, no device name
            killed = "worker killed by SIGKILL"
            return RunResult("p-1", config, "error", device="cpu", steps=steps, error=killed)
        return RunResult("p-2", config, "ok", device="cpu", device_name="Test CPU 9000", steps=steps)

    monkeypatch.setattr(multirank, "run_any", run_any)
    db = f"sqlite:///{tmp_path}/s.sqlite"
    args = ["sweep", "--models", "char", "--batch-sizes", "1,2", "--device", "cpu", "--steps", "1",
            "--warmup", "0", "--db", db]  # fmt: skip
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 1, r.output
    title = next(line for line in r.stdout.splitlines() if line.startswith("sweep-"))
    assert title.endswith(" (Test CPU 9000)") and "()" not in r.stdout, r.stdout
    r = CliRunner().invoke(app, [*args[:4], "1", *args[5:]], env={"COLUMNS": "200"})
    title = next(line for line in r.stdout.splitlines() if line.startswith("sweep-"))
    assert "(" not in title, title


def test_a_sweep_at_60_columns_shows_a_figure_of_each_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A narrow terminal keeps the step's mean before the run ids: a sweep's table of sizes, batches and
    ids alone compares nothing."""
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.core.records import RunResult, StepRecord
    from harness.execution.ranks import multirank

    def run_any(config: RunConfig) -> RunResult:
        ms = 1_000_000 * config.batch_size
        steps = [StepRecord(0, False, {"forward": 10 * ms, "backward": 20 * ms, "optimizer": 5 * ms})]
        run_id = f"char-20261201-082113-98993a5{config.batch_size}"
        status = "error" if config.batch_size == 1 else "ok"  # killed after its steps: the status stays
        return RunResult(run_id, config, status, device="cpu", device_name="Test CPU", steps=steps, error="x")

    monkeypatch.setattr(multirank, "run_any", run_any)
    args = ["sweep", "--models", "char", "--batch-sizes", "1,2", "--device", "cpu", "--steps", "1",
            "--warmup", "0", "--db", f"sqlite:///{tmp_path}/s.sqlite"]  # fmt: skip
    r = CliRunner().invoke(app, args, env={"COLUMNS": "60", "LINES": "100"})
    assert r.exit_code == 1, r.output
    rows = [
        [c.strip() for c in line.strip("│").split("│")] for line in r.stdout.splitlines() if line[:1] == "│"
    ]
    assert [row[:3] for row in rows] == [["char", "1", "35.000"], ["char", "2", "70.000"]], r.stdout
    said = " ".join(r.stdout.split())
    assert "char-20261201-082113-98993a51" in said or ", run;" in said, r.stdout  # shown, or said left out
