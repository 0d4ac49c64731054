"""`harness run --power`: the sources found (or why none), the energy of the measured steps, what is stored.

Two outside things are replaced. NVML, only where a test hands the runner its sources (a parameter, no
patched globals): `RampNvml` answers a constant 300 W and a counter that grows with it, so the joules of any
window are known in advance. And for the command, the folder RAPL is looked for in (discover's default),
so that what it says does not depend on the machine.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from analysis.dashboard import DashboardData
from analysis.dashboard.energy import energy_panel
from harness.cli import app
from harness.core.records import RunConfig, result_from_dict, result_to_dict
from harness.energy.power import discover
from harness.execution.runner import run_workload
from harness.profilers.capture import finish
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore
from tests.power_data import ReplayNvml

WATTS = 300.0
ENERGY_COLUMNS = ["energy_j", "avg_power_w", "peak_power_w", "flops_per_j", "tokens_per_j", "energy_method"]


class RampNvml(ReplayNvml):
    """One GPU drawing a steady 300 W: power in mW, the total-energy counter in mJ growing 300 mJ per ms."""

    def __init__(self) -> None:
        super().__init__([[(0, 0, 0, 1980, 2619, 100, 40, 50)]])

    def _answer(self, fn: str, handle: int, column: str) -> int:
        row = super()._answer(fn, handle, column)
        assert self.started_ns is not None
        elapsed_ms = (self.clock() - self.started_ns) / 1e6
        if column == "power_mw":
            return int(WATTS * 1000)
        if column == "energy_mj":
            return 5_000_000 + int(WATTS * elapsed_ms)
        return row


def test_cli_run_power_says_why_there_are_no_sources_and_stores_nulls(
    tmp_db, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the run (in this process) looks for RAPL zones in a folder that is not there, whatever this machine has
    absent = tmp_path / "no-powercap"
    monkeypatch.setitem(discover.__kwdefaults__, "powercap", absent)
    result = CliRunner().invoke(
        app, ["run", "char", "--device", "cpu", "--steps", "2", "--warmup", "1", "--power"],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    # a CPU run asks no GPU; the one RAPL folder is absent: nothing to sample, each reason said once
    expected = ["NVML: not asked: the run is on the CPU, not a GPU", f"RAPL: {absent} not present"]
    for line in expected:
        assert result.output.count(f"note: {line}") == 1, result.output
    (run,) = ResultsStore(tmp_db, readonly=True).runs().to_dict("records")
    assert run["status"] == "ok"
    assert all(run[c] is None for c in ENERGY_COLUMNS), run  # every energy figure NULL, none made up
    assert "energy (measured steps)" not in result.output
    shown = CliRunner().invoke(app, ["show", run["run_id"], "--format", "json"], catch_exceptions=False)
    fields = json.loads(shown.stdout)["run"]
    assert fields["power notes"].splitlines() == expected


def test_power_notes_are_in_csv_and_json_as_the_terminal_says_them(
    tmp_db, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run --power --format json` printed the power notes (why no energy was measured) on stderr only, and a
    run under nsys did not say them at all: csv and json carry them as a table of their own, `power notes`,
    whatever the profiler; the terminal says them as notes."""
    absent = tmp_path / "no-powercap"
    monkeypatch.setitem(discover.__kwdefaults__, "powercap", absent)
    expected = ["NVML: not asked: the run is on the CPU, not a GPU", f"RAPL: {absent} not present"]
    args = ["run", "char", "--device", "cpu", "--steps", "2", "--warmup", "1", "--power"]
    listed = CliRunner().invoke(app, [*args, "--format", "json"], catch_exceptions=False)
    assert listed.exit_code == 0, listed.output
    assert [row["note"] for row in json.loads(listed.stdout)["power notes"]] == expected
    csv = CliRunner().invoke(app, [*args, "--format", "csv"], catch_exceptions=False)
    assert csv.exit_code == 0, csv.output
    block = next(b for b in csv.stdout.split("\n\n") if b.startswith("# power notes\n"))
    assert pd.read_csv(io.StringIO(block.split("\n", 1)[1]))["note"].tolist() == expected
    # a run under nsys (its outcome as the profiler hands it back): the same table, the same notes
    from harness.cli import render
    from harness.profilers.nsys import ProfiledRun

    result = run_workload(RunConfig("char", device="cpu", warmup=0, steps=1))
    result.extra["power_notes"] = expected
    render.render(ProfiledRun(result.run_id, result, None), "json")
    assert [row["note"] for row in json.loads(capsys.readouterr().out)["power notes"]] == expected
    render.render(ProfiledRun(result.run_id, result, None), "table")
    assert [line for line in capsys.readouterr().err.splitlines() if "not" in line] == [
        f"note: {line}" for line in expected
    ]


def test_runner_with_a_gpu_source_gives_joules_per_phase(tmp_path: Path, tmp_db) -> None:
    config = RunConfig("char", device="cpu", warmup=1, steps=3, power=True, power_period_ms=10)
    sources = discover(nvml=RampNvml(), powercap=tmp_path / "no-powercap")
    with sources:
        measured_in_worker = run_workload(config, power_sources=sources)
    # as the worker hands it back (its result file), and finished before it is stored
    result = finish(result_from_dict(json.loads(json.dumps(result_to_dict(measured_in_worker)))))
    assert "power_samples" not in result.extra  # turned into the energy figures, not stored
    assert result.status == "ok"
    assert result.extra["power_notes"] == ["RAPL: " + str(tmp_path / "no-powercap") + " not present"]
    table = {(r["scope"], r["device"]): r for r in result.extra["energy"]}
    assert {s for s, _ in table} == {"run", "forward", "backward", "optimizer"}
    measured = [s for s in result.steps if not s.warmup]
    window_ns = max(s.starts["optimizer"] + s.phases["optimizer"] for s in measured) - min(
        s.starts["forward"] for s in measured
    )
    run = table[("run", "gpu0")]
    assert run["method"] == "counter"
    assert run["duration_ns"] == window_ns
    assert run["joules"] == pytest.approx(WATTS * window_ns / 1e9, rel=0.02)
    assert run["avg_w"] == pytest.approx(WATTS, rel=0.02)
    assert run["peak_w"] == WATTS
    forward = table[("forward", "gpu0")]
    assert forward["joules"] == pytest.approx(
        WATTS * sum(s.phases["forward"] for s in measured) / 1e9, rel=0.05
    )
    assert forward["flops"] == pytest.approx(result.flops_per_step / 3 * len(measured))
    assert table[("backward", "gpu0")]["flops"] == pytest.approx(2 * forward["flops"])
    assert table[("optimizer", "gpu0")]["flops"] is None  # no analytic FLOPs for AdamW: NaN, stored as null
    summary = result.extra["energy_summary"]
    assert summary["energy_j"] == pytest.approx(table[("run", "total")]["joules"])
    assert summary["flops_per_j"] == pytest.approx(
        result.flops_per_step * len(measured) / summary["energy_j"]
    )
    tokens = config.batch_size * result.model.context_length * len(measured)
    assert summary["tokens_per_j"] == pytest.approx(tokens / summary["energy_j"])

    save_run(ResultsStore(tmp_db), result)
    (row,) = ResultsStore(tmp_db, readonly=True).runs().to_dict("records")
    assert row["energy_j"] == pytest.approx(summary["energy_j"])
    assert row["avg_power_w"] == pytest.approx(WATTS, rel=0.02)
    assert row["energy_method"] == "counter"
    panel = energy_panel(DashboardData(runs=ResultsStore(tmp_db, readonly=True).runs()))
    assert panel.figure is not None and not panel.missing  # the dashboard reads the stored columns as is


def test_step_starts_survive_the_unsaved_file_round_trip() -> None:
    config = RunConfig("char", device="cpu", warmup=0, steps=1)
    result = run_workload(config)
    (step,) = result.steps
    assert list(step.starts) == ["forward", "backward", "optimizer"]
    assert step.starts["forward"] + step.phases["forward"] <= step.starts["backward"]
    assert "power_notes" not in result.extra  # without --power nothing is sampled or said
    again = result_from_dict(json.loads(json.dumps(result_to_dict(result))))
    assert again.steps[0].starts == step.starts


def test_power_period_must_be_positive(tmp_db) -> None:
    result = CliRunner().invoke(app, ["run", "char", "--device", "cpu", "--power", "--power-period", "0"])
    assert result.exit_code == 2
    assert "--power-period must be a positive number, got 0" in result.output


NO_SOURCE = ["NVML: not asked: the run is on the CPU, not a GPU", "RAPL: /sys/class/powercap not present"]


def measured_elsewhere(config: RunConfig, run_id: str):
    """A run as a fresh process hands it back with --power on a machine without a power source."""
    from harness.core.records import RunResult, StepRecord

    steps = [StepRecord(0, False, {"forward": 100, "backward": 200, "optimizer": 50})]
    result = RunResult(run_id, config, "ok", device="cpu", device_name="cpu", steps=steps)
    result.extra["power_notes"] = list(NO_SOURCE)
    return result


def said(result) -> list[str]:
    return [line.removeprefix("note: ") for line in result.stderr.splitlines() if line.removeprefix("note: ")
            in NO_SOURCE]  # fmt: skip


@pytest.mark.parametrize("command", ["sweep", "repeats"])
def test_sweep_and_repeats_give_their_power_notes_in_every_format(
    tmp_db, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sweep --power` said its power notes (why no energy was measured) on stderr only, and `run --repeats N
    --power` said none at all: both give them as `run --power` does, each line once for all their runs, a
    table of its own (`power notes`) in csv and json, notes after the tables in the terminal."""
    from harness.execution.ranks import multirank
    from harness.experiments import drift

    made: list[str] = []

    def run(config: RunConfig):
        made.append(f"char-{len(made)}")
        return measured_elsewhere(config, made[-1])

    monkeypatch.setattr(multirank, "run_any", run)
    monkeypatch.setattr(drift, "run_baseline", lambda config: (run(config), None))
    grid = ["sweep", "--models", "char", "--batch-sizes", "1,2"]
    args = [*(grid if command == "sweep" else ["run", "char", "--repeats", "2"]), "--device", "cpu"]
    args += ["--steps", "1", "--warmup", "0", "--power"]
    listed = CliRunner().invoke(app, [*args, "--format", "json"], catch_exceptions=False)
    assert listed.exit_code == 0, listed.output
    assert [row["note"] for row in json.loads(listed.stdout)["power notes"]] == NO_SOURCE
    assert said(listed) == []  # in the document, not beside it
    csv = CliRunner().invoke(app, [*args, "--format", "csv"], catch_exceptions=False)
    assert csv.exit_code == 0, csv.output
    block = next(b for b in csv.stdout.split("\n\n") if b.startswith("# power notes\n"))
    assert pd.read_csv(io.StringIO(block.split("\n", 1)[1]))["note"].tolist() == NO_SOURCE
    table = CliRunner().invoke(app, args, catch_exceptions=False)
    assert table.exit_code == 0, table.output
    assert said(table) == NO_SOURCE and "power notes" not in table.stdout  # each once, after the tables
    assert len(made) == 6
