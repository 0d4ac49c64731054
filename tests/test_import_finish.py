"""`harness import` of what a run is finished with before it is stored (harness.profilers.capture.finish):
the figures made from its steps are made afresh from the file's steps, what only a running harness holds
(the power samples, the token times beside the summary) is refused, and the figures it keeps as written
(the energy table, the power notes, the machine's load) are checked as `show` and `runs` read them.
Edited copies of tests/data/harness-unsaved-char.json, as tests/test_import_faults.py makes them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_import_faults import REAL, RUN_ID, edited, invoke, one_error, runner, stored, written
from test_run_energy import RampNvml

from harness.cli import app
from harness.core import machine
from harness.core.records import RunConfig, RunResult, result_from_dict, result_to_dict
from harness.energy.power import discover
from harness.execution.runner import run_workload
from harness.experiments.program import program_config
from harness.profilers.capture import finish
from harness.store import unsaved
from harness.store.results import ResultsStore

pytestmark = pytest.mark.attack(saves=True)

SAMPLES = {
    "samples": {"columns": ["device", "tick", "t_ns", "power_w"], "data": [["gpu0", 0, 0, 1e6]]},
    "flops": {"forward": 1.0},
    "tokens_per_step": 1.0,
}
LOAD = {
    "cpus": 2,
    "seconds": 1.0,
    "load_before": 0.5,
    "load_after": 0.5,
    "others_share": 0.1,
    "own_share": 0.4,
}

CASES = [
    # the worker's samples become the energy table before a run is written: made-up ones would give a run
    # that was never sampled (--power off) an energy table of the file's making
    ("result.extra.power_samples", SAMPLES, "extra.power_samples is in the file"),
    ("result.extra.power_samples", "x", "extra.power_samples is in the file"),
    # the token times beside the summary are the steps' own (stored, these end `diff` in a KeyError)
    ("result.extra.token_timings", [{"x": 1}], "extra.token_timings is in the file"),
    # stored, `show` would end in a TypeError
    ("result.extra.energy", [1, 2], "extra.energy[0] is int, not an object"),
    ("result.extra.energy", "abc", "extra.energy is str, not a list"),
    ("result.extra.energy", [{"scope": "run", "joules": "lots"}], "extra.energy[0].joules is 'lots'"),
    ("result.extra.energy", [{"scope": "run\x1b[2J"}], r"extra.energy[0].scope is 'run\x1b[2J': it holds"),
    ("result.extra.energy", [{"avg_w": float("inf")}], "extra.energy[0].avg_w is inf, not a finite number"),
    # stored, `show` and `runs` would end in a TypeError
    ("result.extra.power_notes", 5, "extra.power_notes is int, not a list"),
    ("result.extra.power_notes", "abc", "extra.power_notes is str, not a list"),
    ("result.extra.power_notes", [5], "extra.power_notes[0] is 5, not text"),
    # stored, `show` would end in a TypeError
    ("result.extra.machine", "abc", "extra.machine is str, not an object"),
    ("result.extra.machine", {**LOAD, "cpus": 0}, "extra.machine.cpus is 0, outside 1.."),
    ("result.extra.machine", {"cpus": 2}, "extra.machine lacks seconds, load_before"),
    ("result.extra.machine", {**LOAD, "seconds": None}, "extra.machine.seconds is missing (null)"),
    ("result.extra.machine", {**LOAD, "load_before": "high"}, "extra.machine.load_before is 'high'"),
]


@pytest.mark.parametrize(("where", "value", "message"), CASES, ids=[f"{c[0]}={c[1]!r}"[:60] for c in CASES])
def test_what_a_finished_run_never_holds_is_refused_and_nothing_is_stored(
    tmp_path: Path, db: Path, where: str, value: Any, message: str
) -> None:
    """Each in the file of a --power run, which may hold an energy table and notes."""
    path = edited(tmp_path, where, value)
    data = json.loads(path.read_text())
    data["result"]["config"]["power"] = True
    path.write_text(json.dumps(data))
    line = one_error(invoke(path, db=db), message)
    assert line.endswith("(harness writes no such run): nothing imported"), line
    assert stored(db) == {}


def summary(db: Path, run_id: str = RUN_ID) -> dict[str, Any]:
    run = ResultsStore(str(db), readonly=True).get(run_id)
    assert run is not None
    return run.summary


def test_first_step_and_compile_time_are_made_from_the_files_steps(tmp_path: Path, db: Path) -> None:
    """An eager run's file with a compile time of its own making (`show` would give a 999 s compile and a
    steady median of -996,653 ms) and a first step that is not its first step's: both are the steps', made
    afresh as the run is imported."""
    data = json.loads(REAL.read_text())
    data["result"]["extra"].update(
        first_step_ns=1, compile_ns=999_000_000_000, steady_phases_ns={"forward": 1}
    )
    path = tmp_path / "e.json"
    path.write_text(json.dumps(data))
    assert invoke(path, db=db).exit_code == 0
    kept = summary(db)
    first = data["result"]["steps"][0]["phases"]
    assert kept["first_step_ns"] == sum(first.values()) and kept["first_step_phases"] == first
    assert not {"compile_ns", "compile_phases_ns", "steady_phases_ns"} & set(kept)  # not compiled
    shown = runner.invoke(app, ["show", RUN_ID, "--db", str(db), "--format", "json"])
    assert shown.exit_code == 0 and "compile (first step)" not in json.loads(shown.stdout), shown.output


def test_a_run_without_a_warm_up_step_keeps_no_first_step(tmp_path: Path, db: Path) -> None:
    """Its first step is a measured one: no first step or compile time, whatever the file says."""
    data = json.loads(REAL.read_text())
    data["result"]["config"]["warmup"] = 0
    data["result"]["steps"][0]["warmup"] = False
    data["result"]["extra"]["compile_ns"] = 5
    path = tmp_path / "e.json"
    path.write_text(json.dumps(data))
    assert invoke(path, db=db).exit_code == 0
    assert not {"first_step_ns", "first_step_phases", "compile_ns"} & set(summary(db))


def test_a_power_run_written_to_a_file_is_imported_with_its_energy(tmp_path: Path, db: Path) -> None:
    """A --power run (one GPU at a steady 300 W) finished, then written to a file as a refused save writes
    it, with the machine's load: the file is taken, and its energy table, figures and notes are stored as
    the run had them."""
    config = RunConfig("char", device="cpu", warmup=1, steps=2, power=True, power_period_ms=10)
    start = machine.snapshot()
    with discover(nvml=RampNvml(), powercap=tmp_path / "no-powercap") as sources:
        result = run_workload(config, power_sources=sources)
    machine.keep_load(result.extra, start)
    result = finish(result_from_dict(json.loads(json.dumps(result_to_dict(result)))))
    assert result.extra["energy_summary"]["energy_j"] > 0 and "power_samples" not in result.extra
    path = unsaved.write(unsaved.PendingRun(result, datetime.now(UTC)), [tmp_path], "test")
    imported = invoke(path, db=db)
    assert imported.exit_code == 0, imported.output
    kept = summary(db, result.run_id)
    for name in ("energy", "energy_summary", "power_notes", "machine", "first_step_ns"):
        assert kept.get(name) == result.extra.get(name), name
    shown = runner.invoke(app, ["show", result.run_id, "--db", str(db)])
    assert shown.exit_code == 0 and "energy (measured steps)" in shown.output, shown.output


NOT_SAMPLED = [
    ("energy", [{"scope": "run", "device": "gpu0", "energy_j": 5.0}]),
    ("energy_summary", {"energy_j": 5.0, "avg_power_w": 300.0}),
    ("power_notes", ["NVML: 1 GPU"]),
]


@pytest.mark.parametrize(("name", "value"), NOT_SAMPLED, ids=[c[0] for c in NOT_SAMPLED])
def test_energy_in_the_file_of_a_run_without_power_is_refused(
    tmp_path: Path, db: Path, name: str, value: Any
) -> None:
    """A run whose configuration did not ask for power (--power off) was never sampled: an energy table,
    figures or notes in its file are the file's making. Refused, not dropped: the file is not what `run`
    wrote, and a copy changed in one field may be changed in others."""
    line = one_error(
        invoke(edited(tmp_path, f"result.extra.{name}", value), db=db),
        f"extra.{name} is in the file, but the run did not ask for power (config.power is false)",
    )
    assert line.endswith("nothing imported"), line
    assert stored(db) == {}


PARTS = [
    # the dashboard's optimize waterfall reads role, stack, change and verdict (a stack of 5: a TypeError)
    ("result.extra.optimize", "abc", "extra.optimize is str, not an object"),
    ("result.extra.optimize", {"role": "timed", "stack": 5}, "extra.optimize.stack is 5, not a list of the"),
    ("result.extra.optimize", {"role": "timed", "stack": ["x"]}, "extra.optimize.stack is ['x'], not a list"),
    ("result.extra.optimize", {"role": "judge", "stack": []}, "extra.optimize.role is 'judge', not one of"),
    (
        "result.extra.optimize",
        {"role": "timed", "stack": [], "change": "x\x1b[2J"},
        "extra.optimize.change is",
    ),
    (
        "result.extra.optimize",
        {"role": "timed", "stack": [], "verdict": 5},
        "extra.optimize.verdict is 5, not",
    ),
    ("result.extra.optimize", {"role": "timed", "stack": [], "more": 1}, "extra.optimize holds fields the"),
    # `health RUN` hands nsys's capture range to the capture check's advice
    ("result.extra.capture_range", 5, "extra.capture_range is 5, not text"),
    ("result.extra.capture_range", "-c nvtx\x1b[2J", r"extra.capture_range is '-c nvtx\x1b[2J': it holds"),
    ("result.extra.ranks", 5, "extra.ranks is int, not a list"),
    ("result.extra.ranks", [{"rank": 0, "status": "fine"}], "extra.ranks[0].status is 'fine', not one of"),
    ("result.extra.ranks", [{"rank": -1, "status": "ok"}], "extra.ranks[0].rank is -1, outside 0.."),
    ("result.extra.world_size", 0, "extra.world_size is 0, outside 1.."),
    ("result.extra.failed_rank", "x", "extra.failed_rank is 'x', not a whole number"),
]


@pytest.mark.parametrize(("where", "value", "message"), PARTS, ids=[f"{c[0]}={c[1]!r}"[:60] for c in PARTS])
def test_a_runs_part_in_optimize_its_capture_range_and_ranks_are_checked(
    tmp_path: Path, db: Path, where: str, value: Any, message: str
) -> None:
    line = one_error(invoke(edited(tmp_path, where, value), db=db), message)
    assert line.endswith("(harness writes no such run): nothing imported"), line
    assert stored(db) == {}


def _program(extra: dict[str, Any], run_id: str = "ls-20261127-101937-51e2") -> RunResult:
    """A `profile -- CMD` run as program.py writes it, with `extra`."""
    return RunResult(
        run_id=run_id,
        config=program_config("ls"),
        status="error",
        device="n/a",
        error="exited 2",
        extra=extra,
    )


PROGRAMS = [
    ({"command": 5, "exit_code": 2}, "extra.command is 5, not a list of arguments"),  # show: TypeError
    ({"command": "ls -l", "exit_code": 2}, "extra.command is 'ls -l', not a list of arguments"),
    ({"command": [], "exit_code": 2}, "extra.command is [], not a list of arguments"),
    ({"command": ["ls", 5], "exit_code": 2}, "extra.command[1] is 5, not text"),  # show: TypeError
    ({"command": ["ls\x00"], "exit_code": 2}, r"extra.command[0] is 'ls\x00': it holds control characters"),
    ({"command": ["ls"], "exit_code": "2"}, "extra.exit_code is '2', not a whole number"),
    ({"command": ["ls"], "exit_code": 1.5}, "extra.exit_code is 1.5, not a whole number"),
    ({"command": ["ls"], "exit_code": True}, "extra.exit_code is True, not a whole number"),
    ({"command": ["ls"], "exit_code": 10**30}, "extra.exit_code is 1000000000000000000000000000000, outside"),
    ({"command": ["ls"], "exit_code": -99}, "extra.exit_code is -99, outside -64..255"),
    ({"command": ["ls"], "exit_code": 256}, "extra.exit_code is 256, outside -64..255"),
]


def test_a_programs_run_with_steps_is_refused_as_such(tmp_path: Path, db: Path) -> None:
    """A program's run with a step of the train loop was said to have a phase 'forward', "not one of "
    (of no phase at all)."""
    data = json.loads(written(_program({"command": ["ls"]}), tmp_path).read_text())
    data["result"]["steps"] = json.loads(REAL.read_text())["result"]["steps"][:1]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    one_error(invoke(path, db=db), "steps hold 1: a program's run (`profile -- CMD`) times no steps")
    assert stored(db) == {}


@pytest.mark.parametrize(("extra", "message"), PROGRAMS, ids=[repr(c[0])[:50] for c in PROGRAMS])
def test_a_programs_command_and_exit_code_are_checked(
    tmp_path: Path, db: Path, extra: dict[str, Any], message: str
) -> None:
    line = one_error(invoke(written(_program(extra), tmp_path), db=db), message)
    assert line.endswith("(harness writes no such run): nothing imported"), line
    assert stored(db) == {}


def test_what_the_harness_writes_of_programs_optimize_and_ranks_is_taken(tmp_path: Path, db: Path) -> None:
    """The checks take every value `profile`, `optimize` and a run across ranks write; a command's text is
    data, kept as it was and shown escaped on the terminal."""
    command = ["python3", "-c", "print(1)\n\x1b[31mred"]
    files = [
        written(_program({"command": command, "exit_code": -9, "capture_range": None}), tmp_path),
        written(_program({"command": ["ls"], "exit_code": 137}, "ls-2"), tmp_path),
    ]
    data = json.loads(REAL.read_text())
    data["result"]["extra"].update(
        optimize={"role": "timed", "stack": ["compile"], "change": "compile", "verdict": "faster"},
        capture_range="--capture-range=nvtx",
        ranks=[{"rank": 0, "status": "ok", "error": None}],
        world_size=1,
        failed_rank=None,
    )
    files.append(tmp_path / "r.json")
    files[-1].write_text(json.dumps(data))
    result = runner.invoke(app, ["import", *map(str, files), "--db", str(db)])
    assert result.exit_code == 0, result.output
    shown = runner.invoke(app, ["show", "ls-20261127-101937-51e2", "--db", str(db), "-f", "json"])
    assert json.loads(shown.stdout)["run"]["command"] == "python3 -c 'print(1)\n\x1b[31mred'"
    table = runner.invoke(app, ["show", "ls-20261127-101937-51e2", "--db", str(db)])
    assert table.exit_code == 0 and "\x1b" not in table.stdout, table.output


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "results.sqlite"
    ResultsStore(str(path))  # created, empty
    return path
