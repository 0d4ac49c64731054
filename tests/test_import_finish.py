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
from test_import_faults import REAL, RUN_ID, edited, invoke, one_error, runner, stored
from test_run_energy import RampNvml

from harness.cli import app
from harness.core import machine
from harness.core.records import RunConfig, result_from_dict, result_to_dict
from harness.energy.power import discover
from harness.execution.runner import run_workload
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
    line = one_error(invoke(edited(tmp_path, where, value), db=db), message)
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


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "results.sqlite"
    ResultsStore(str(path))  # created, empty
    return path
