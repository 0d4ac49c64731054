"""`harness show`: a profiled run with its baseline, and the overhead between them."""

from __future__ import annotations

import csv
import io
import json

import pandas as pd
import pytest
from test_store import make_result

from harness.core.machine import MachineLoad
from harness.core.records import RunResult, StepRecord
from harness.experiments.show import show_tables
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore


@pytest.fixture
def store(tmp_db: str) -> ResultsStore:
    s = ResultsStore(tmp_db)
    base = make_result("tiny-base")
    base.extra["machine"] = MachineLoad(2, 10.0, 0.4, 1.2, 0.05, 0.45).to_dict()
    save_run(s, base, experiment="overhead-1")
    save_run(
        s,
        make_result("tiny-prof", fwd=1_100_000),
        profiler="nsys",
        nsys_mode="light",
        experiment="overhead-1",
        baseline_run_id="tiny-base",
    )
    return s


def test_show_profiled_run_shows_its_baseline_and_the_overhead(store: ResultsStore) -> None:
    run = store.get("tiny-prof")
    tables = dict(show_tables(run, store.linked(run.id)))
    info = dict(zip(tables["run"]["field"], tables["run"]["value"], strict=True))
    assert info["baseline run"] == "tiny-base" and info["profiler"] == "nsys (light)"
    base_phases = tables["baseline run tiny-base (no profiler): phases"].set_index("Phase")
    assert base_phases.loc["forward", "Avg (ns)"] == pytest.approx(1_000_003)
    overhead = tables["overhead of tiny-prof against tiny-base (one run each)"].set_index("Phase")
    fwd = overhead.loc["forward"]
    assert fwd["nsys light Avg (ns)"] == pytest.approx(1_100_003)
    assert fwd["nsys light overhead (%)"] == pytest.approx(100_000 / 1_000_003 * 100, rel=1e-6)
    assert fwd["nsys light verdict"].startswith("nsys light adds 10.0% (CI ")
    assert list(overhead.index) == ["forward", "backward", "optimizer", "step (sum)"]


def test_show_baseline_names_its_profiled_run_and_machine_load(store: ResultsStore) -> None:
    run = store.get("tiny-base")
    tables = dict(show_tables(run, store.linked(run.id)))
    info = dict(zip(tables["run"]["field"], tables["run"]["value"], strict=True))
    assert info["profiled runs"] == "tiny-prof" and info["baseline run"] is None
    assert info["machine"] == (
        "load average 0.40 before, 1.20 after on 2 CPUs; other processes took 5% of the CPU time"
    )
    assert "profiled run tiny-prof (nsys light): phases" in tables
    assert "overhead of tiny-prof against tiny-base (one run each)" in tables


def test_show_unpaired_run_has_no_pair_tables(store: ResultsStore) -> None:
    save_run(store, make_result("tiny-alone"))
    names = [name for name, _ in show_tables(store.get("tiny-alone"), [])]
    assert names == ["run", "phases (measured steps)", "steps"]


def test_show_json_gives_the_run_as_an_object_keyed_by_field_with_numbers_as_numbers(
    store: ResultsStore, tmp_db: str
) -> None:
    import json

    from typer.testing import CliRunner

    from harness.cli import app
    from harness.experiments.show import run_fields

    result = CliRunner().invoke(app, ["show", "tiny-base", "--db", tmp_db, "--format", "json"])
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)["run"]
    assert run["run"] == "tiny-base" and run["batch size"] == 4 and run["tokens/s"] == 1234.5
    assert (run["warmup steps"], run["measured steps"]) == (2, 3)
    assert run["parameters"] == 22_696_448 and run["baseline run"] is None
    assert run_fields({"run": run}) == run


def test_show_json_of_earlier_versions_reads_the_same_fields() -> None:
    import json

    from conftest import SHARED_NSYS, need

    from harness.experiments.show import run_fields

    old = json.loads(need(SHARED_NSYS / "h100-medium" / "run.json").read_text())
    assert isinstance(old["run"], list)  # [{"field": …, "value": …}, …], as `show` wrote it before
    run = run_fields(old)
    assert run["run"] == "medium-20261127-074355-aaff" and run["batch size"] == 4
    assert (run["warmup steps"], run["measured steps"]) == (5, 10)
    assert run["device"] == "cuda (NVIDIA H100 80GB HBM3)"


def test_show_program_run_gives_its_command_and_exit_code_not_empty_step_tables(tmp_db: str) -> None:
    from harness.core.records import RunResult
    from harness.experiments.program import NOT_APPLICABLE, program_config

    store = ResultsStore(tmp_db)
    command = ["python", "my script.py", "a b"]
    result = RunResult(
        "prog-1", program_config("python"), "error", device=NOT_APPLICABLE,
        error="the program exited with code 3", extra={"command": command, "exit_code": 3},
    )  # fmt: skip
    save_run(store, result, profiler="nsys", nsys_mode="light")
    tables = dict(show_tables(store.get("prog-1"), []))
    info = dict(zip(tables["run"]["field"], tables["run"]["value"], strict=True))
    assert info["command"] == "python 'my script.py' 'a b'" and info["exit code"] == 3
    assert info["device"] == NOT_APPLICABLE  # no device name to add in brackets
    assert list(tables) == ["run"]  # the harness timed nothing inside a program: no phase or step table


def test_show_of_a_program_run_gives_no_workload_settings(tmp_db: str) -> None:
    """A `profile -- CMD` run showed `batch size 0`, `warmup steps 0`, `compile no`, `measured steps 0`:
    settings of a workload the harness never ran. They are left out; the command and the profiler stay."""
    from harness.core.records import RunResult
    from harness.experiments.program import program_config

    store = ResultsStore(tmp_db)
    result = RunResult(
        "prog-2",
        program_config("python"),
        "ok",
        device="n/a",
        extra={"command": ["python", "x.py"], "exit_code": 0},
    )
    save_run(store, result, profiler="nsys", nsys_mode="light")
    fields = list(dict(show_tables(store.get("prog-2"), []))["run"]["field"])
    assert fields[:7] == ["run", "created", "status", "model", "mode", "command", "exit code"]
    assert not {"batch size", "warmup steps", "measured steps", "compile", "precision", "tokens/s"} & set(
        fields
    )
    assert {"device", "profiler"} <= set(fields)


def test_show_says_a_file_of_the_run_that_is_gone(store: ResultsStore, tmp_path) -> None:
    from typer.testing import CliRunner

    from harness.cli import app

    kept, gone = tmp_path / "r.nsys-rep", tmp_path / "r.sqlite"
    kept.write_bytes(b"x")
    save_run(store, make_result("tiny-files"), profiler="nsys", nsys_rep=str(kept), nsys_sqlite=str(gone))
    result = CliRunner().invoke(app, ["show", "tiny-files"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert f"nsys report: {kept}\n" in result.output
    assert f"nsys sqlite: {gone} (no such file: moved or deleted)" in result.output


def _one_step(run_id: str) -> RunResult:
    result = make_result(run_id)
    result.config.warmup, result.config.steps = 0, 1
    result.steps = [StepRecord(step=0, warmup=False, phases={"forward": 7, "backward": 9, "optimizer": 4})]
    return result


def test_one_measured_step_has_no_standard_deviation(tmp_db: str) -> None:
    """One measured step: its StdDev is empty (null in json, empty in csv, a dash in the table), not 0."""
    from typer.testing import CliRunner

    from harness.cli import app

    save_run(ResultsStore(tmp_db), _one_step("tiny-one"))
    shown = CliRunner().invoke(app, ["show", "tiny-one", "--db", tmp_db, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    phases = json.loads(shown.stdout)["phases (measured steps)"]
    assert [(p["Phase"], p["Avg (ns)"], p["StdDev (ns)"]) for p in phases] == [
        ("step (sum)", 20.0, None), ("forward", 7.0, None), ("backward", 9.0, None), ("optimizer", 4.0, None)
    ]  # fmt: skip
    listed = CliRunner().invoke(app, ["runs", "--db", tmp_db, "--format", "csv"])
    row = next(csv.DictReader(io.StringIO(listed.stdout)))
    assert (row["forward_mean_ns"], row["forward_std_ns"]) == ("7.0", "")


def test_a_stored_single_step_zero_reads_as_no_standard_deviation(tmp_db: str) -> None:
    """Databases written before held 0.0 as one step's std: they read as none, with the same figures."""
    store = ResultsStore(tmp_db)
    save_run(store, _one_step("tiny-old"))
    with store.engine.begin() as con:  # as the store wrote it then
        summary = json.loads(con.exec_driver_sql("SELECT summary FROM runs").scalar_one())
        for p in summary["phases"]:
            p["std_ns"] = 0.0
        con.exec_driver_sql("UPDATE runs SET summary = ?", (json.dumps(summary),))
    phases = dict(show_tables(store.get("tiny-old")))["phases (measured steps)"]
    assert phases["StdDev (ns)"].isna().all() and phases["Avg (ns)"].tolist() == [20.0, 7.0, 9.0, 4.0]
    assert store.runs()["forward_std_ns"].isna().all()


def test_show_gives_each_power_note_a_line_of_its_own(tmp_db: str) -> None:
    """The harness's own notes, joined by newlines in csv and json, are rows of their own on the terminal
    (never one cell with a literal `\\n`)."""
    from typer.testing import CliRunner

    from harness.cli import app

    notes = ["NVML: not asked: the run is on the CPU, not a GPU", "RAPL: /sys/class/powercap not present"]
    result = make_result("tiny-power")
    result.extra["power_notes"] = notes
    save_run(ResultsStore(tmp_db), result)
    shown = CliRunner().invoke(app, ["show", "tiny-power", "--db", tmp_db], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "\\n" not in shown.output
    lines = shown.output.splitlines()
    (at,) = [i for i, line in enumerate(lines) if "power notes" in line]
    assert notes[0] in lines[at] and notes[1] in lines[at + 1]
    assert [c.strip() for c in lines[at + 1].split("│")][1] == ""  # the field is named once
    as_csv = CliRunner().invoke(app, ["show", "tiny-power", "--db", tmp_db, "--format", "csv"])
    rows = {r[0]: r[1] for r in csv.reader(io.StringIO(as_csv.stdout)) if len(r) == 2}
    assert rows["power notes"].splitlines() == notes
    as_json = CliRunner().invoke(app, ["show", "tiny-power", "--db", tmp_db, "--format", "json"])
    assert json.loads(as_json.stdout)["run"]["power notes"].splitlines() == notes


def test_show_says_an_overhead_drawn_from_a_run_that_stopped_short(tmp_db: str) -> None:
    """A profiled run whose baseline failed after 2 of its 3 measured steps: its overhead (+10%) is drawn
    from the steps measured before the failure, and the tables say so, as diff does (they said nothing)."""
    s = ResultsStore(tmp_db)
    base = make_result("tiny-base")
    base.status, base.error, base.steps = "error", "worker exit code 1", base.steps[:4]
    save_run(s, base)
    save_run(
        s,
        make_result("tiny-prof", fwd=1_100_000),
        profiler="nsys",
        nsys_mode="light",
        baseline_run_id="tiny-base",
    )
    run = s.get("tiny-prof")
    names = [name for name, _ in show_tables(run, s.linked(run.id))]
    assert names[-2:] == [
        "baseline run tiny-base (no profiler, ended error: the steps it measured before): phases",
        "overhead of tiny-prof against tiny-base (one run each; tiny-base ended error: its steps are those "
        "it measured before)",
    ]
    # a degraded run's timers stand: nothing said of it
    s.save_advice("tiny-base", {}, status="degraded", error="its capture failed its health checks")
    names = [name for name, _ in show_tables(s.get("tiny-base"), s.linked("tiny-base"))]
    assert names[-2:] == [
        "profiled run tiny-prof (nsys light): phases",
        "overhead of tiny-prof against tiny-base (one run each)",
    ]


def test_show_writes_the_phase_figures_as_the_other_tables_of_these_columns_do(tmp_db: str) -> None:
    """Min and Max whole nanoseconds; Avg, Med and StdDev to a tenth of one, rounded half up (nsys's
    tables and every table of these columns): the median of two steps is half way between them, and a
    mean or standard deviation held every float digit (2.1213203435596424 ns)."""
    from typer.testing import CliRunner

    from harness.cli import app

    result = make_result("tiny-two")
    result.config.warmup, result.config.steps = 0, 2
    result.steps = [
        StepRecord(step=0, warmup=False, phases={"forward": 1_000_001, "backward": 9, "optimizer": 4}),
        StepRecord(step=1, warmup=False, phases={"forward": 1_000_004, "backward": 9, "optimizer": 4}),
    ]
    save_run(ResultsStore(tmp_db), result)
    shown = CliRunner().invoke(app, ["show", "tiny-two", "--db", tmp_db, "--format", "csv"])
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    at = lines.index("# phases (measured steps)")
    assert lines[at + 1 : at + 4] == [
        "Phase,Steps,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns)",
        "step (sum),2,1000015.5,1000015.5,1000014,1000017,2.1",
        "forward,2,1000002.5,1000002.5,1000001,1000004,2.1",
    ]
    as_json = CliRunner().invoke(app, ["show", "tiny-two", "--db", tmp_db, "--format", "json"])
    backward = json.loads(as_json.stdout)["phases (measured steps)"][2]
    assert backward == {
        "Phase": "backward", "Steps": 2, "Avg (ns)": 9.0, "Med (ns)": 9.0, "Min (ns)": 9, "Max (ns)": 9,
        "StdDev (ns)": 0.0,
    }  # fmt: skip


def test_show_says_how_many_tokens_a_generate_run_decodes_where_it_measured_no_step(tmp_db: str) -> None:
    """A generate run out of memory before its first step has no serving table; its run table still says
    the tokens it was to decode (runs and diff name them as part of its configuration)."""
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.core.records import RunConfig

    config = RunConfig(model="tiny", mode="generate", batch_size=100_000_000, new_tokens=8, steps=2)
    save_run(
        ResultsStore(tmp_db), RunResult("tiny-gen-oom", config, "oom", device="cpu", error="out of memory")
    )
    shown = CliRunner().invoke(app, ["show", "tiny-gen-oom", "--db", tmp_db, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    run = json.loads(shown.stdout)["run"]
    assert (run["mode"], run["batch size"], run["new tokens"]) == ("generate", 100_000_000, 8)
    save_run(ResultsStore(tmp_db), make_result("tiny-train"))
    train = dict(show_tables(ResultsStore(tmp_db).get("tiny-train")))["run"]
    assert "new tokens" not in set(train["field"])  # a train run decodes nothing


def test_show_gives_the_nvtx_difference_the_decimals_run_gives_it(tmp_db: str) -> None:
    """NVTX against the timers is usually within 0.05%: run prints 0.004 (three decimals); show printed the
    same stored difference as 0.0."""
    import pandas as pd
    from typer.testing import CliRunner

    from harness.cli import app

    store = ResultsStore(tmp_db)
    save_run(store, make_result("tiny-nvtx"), profiler="nsys", nsys_mode="light")
    store.save_agreement(
        "tiny-nvtx",
        pd.DataFrame(
            {
                "phase": ["forward"], "steps": [3], "rel_diff": [40 / 1_000_003],
                "nvtx_mean_ns": [1_000_043.0], "timer_mean_ns": [1_000_003.0],
                "nvtx_median_ns": [1_000_043.0], "timer_median_ns": [1_000_003.0],
            }
        ),
    )  # fmt: skip
    shown = CliRunner().invoke(app, ["show", "tiny-nvtx", "--db", tmp_db], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    row = next(
        line for line in lines[lines.index("NVTX vs in-process timers") :] if line.startswith("│ forward ")
    )
    assert [c.strip() for c in row.split("│")[1:-1]] == [
        "forward",
        "3",
        "1.000",
        "1.000",
        "1.000",
        "1.000",
        "0.004",
    ]


def test_runs_give_a_program_run_no_batch_size_and_no_compile(tmp_db: str) -> None:
    """A `profile -- CMD` run is stored with batch 0 and compile False (columns that take no NULL); `runs`
    (table, csv, json) and the dashboard's rows read it as a run without either, as its context."""
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.experiments.program import NOT_APPLICABLE, program_config

    store = ResultsStore(tmp_db)
    program = RunResult(
        "prog-3", program_config("python"), "ok", device=NOT_APPLICABLE,
        extra={"command": ["python", "x.py"], "exit_code": 0},
    )  # fmt: skip
    save_run(store, program, profiler="nsys", nsys_mode="light")
    save_run(store, make_result("tiny-run"))
    rows = store.runs().set_index("run_id")
    assert rows.loc["prog-3", "batch_size"] is pd.NA and rows.loc["prog-3", "compile"] is None
    assert rows.loc["tiny-run", "batch_size"] == 4 and rows.loc["tiny-run", "compile"] == False  # noqa: E712
    out = CliRunner().invoke(app, ["runs", "--db", tmp_db, "--format", "json"])
    assert out.exit_code == 0, out.output
    listed = {r["run_id"]: r for r in json.loads(out.output)}
    assert (listed["prog-3"]["batch_size"], listed["prog-3"]["compile"]) == (None, None)
    assert (listed["tiny-run"]["batch_size"], listed["tiny-run"]["compile"]) == (4, False)
    out = CliRunner().invoke(app, ["runs", "--db", tmp_db, "--format", "csv"])
    listed = {r["run_id"]: r for r in csv.DictReader(io.StringIO(out.output))}
    assert (listed["prog-3"]["batch_size"], listed["prog-3"]["compile"]) == ("", "")
    out = CliRunner().invoke(app, ["runs", "--db", tmp_db, "--wide"], env={"COLUMNS": "400"})
    line = next(x for x in out.output.splitlines() if "prog-3" in x)
    cells = [c.strip() for c in line.strip("│ ").split("│")]
    assert "0" not in cells and "no" not in cells
