"""A run stopped before its end (Ctrl-C, SIGTERM): its capture lacks the ranges of the step it stopped in and
every step after it. `harness health RUN` says so (a warning naming the step and the steps never run), not
ranges the profiler lost; a capture whose steps lack ranges is said with the right count.

The export is the A100 fixture with harness ranges (steps 0–4, step 0 warm-up, a `measured` range over
1–4), its step 4 cut inside its forward (its `forward` range left open, its `backward` range deleted), as
a stop leaves it.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from export_data import derive, with_harness_ranges
from reading import flat
from test_store import make_result
from typer.testing import CliRunner

from harness.cli import app
from harness.core.records import RunConfig, RunResult, StepRecord
from harness.execution.nsys import ProfileResult
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()


def _cut(a100_export: Path, tmp_path: Path) -> Path:
    ranged = with_harness_ranges(a100_export, tmp_path / "ranged.sqlite")
    return derive(
        ranged,
        tmp_path / "cut.sqlite",
        "DELETE FROM NVTX_EVENTS WHERE text = 'backward' AND int64Value = 4",
        "UPDATE NVTX_EVENTS SET end = NULL WHERE text = 'forward' AND int64Value = 4",  # open at the stop
    )


def _interrupted(run_id: str, measured: int, sig: str = "SIGINT") -> RunResult:
    """A run of 1 warm-up and 10 measured steps that `sig` stopped after `measured` of them."""
    result = make_result(run_id)
    result.config = RunConfig(model="tiny", warmup=1, steps=10)
    phases = {"forward": 1_000_000, "backward": 2_000_000}
    result.steps = [StepRecord(step=i, warmup=i < 1, phases=phases) for i in range(measured + 1)]
    result.status, result.error = "interrupted", f"interrupted by {sig} after {measured} of 10 measured steps"
    return result


def _checks(args: list[str]) -> tuple[int, dict[str, dict[str, str]]]:
    result = runner.invoke(app, [*args, "--format", "json"])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, {r["Check"]: r for r in json.loads(result.stdout)["health"]}


def test_an_interrupted_run_says_its_last_steps_never_ran(
    tmp_db: str, a100_export: Path, tmp_path: Path
) -> None:
    """Stopped in step 4 after 3 of its 10 measured steps: step 4 lacks its backward range and steps 5–10 are
    not there because they never ran. It was a failure that blamed the profiler ("capture again with a
    profiler that supports the program's CUDA") and counted wrong ("step 4 of 4 measured steps lack")."""
    result = _interrupted("tiny-stopped", 3)
    store = ResultsStore(tmp_db)
    save_run(store, result, profiler="nsys", nsys_mode="light", nsys_sqlite=str(_cut(a100_export, tmp_path)))
    _, checks = _checks(["health", "tiny-stopped"])
    check = checks["NVTX steps"]
    assert check["Status"] == "warn"
    assert check["Evidence"].startswith(
        "the run was interrupted by SIGINT in step 4, after 3 of its 10 measured steps (1–10): step 4 has "
        "no backward range (it stopped inside it); the 6 measured steps after it never ran; the harness's "
        "ranges end at "
    ), check["Evidence"]
    assert "profiler" not in check["What to do"]
    assert check["What to do"] == (
        "the NVTX tables and the split by phase hold the 3 measured steps finished before the stop; run "
        "again to measure all 10"
    )
    assert checks["open ranges"]["Evidence"] == (
        "1 NVTX range never ends (their time runs to the capture's end): it was open when the run was "
        "interrupted by SIGINT, after 3 of its 10 measured steps (1–10)"
    )
    assert checks["open ranges"]["What to do"] == "the run was stopped: run again to measure all 10 steps"


def test_a_run_interrupted_between_steps_is_not_shown_sound(
    tmp_db: str, a100_export: Path, tmp_path: Path
) -> None:
    """Stopped between steps 4 and 5, after 4 of its 10 measured steps: every step in its capture has its
    ranges, and the check still says that 6 never ran (it was ok: "4 measured steps, each with …")."""
    result = _interrupted("tiny-between", 4, "SIGTERM")
    export = with_harness_ranges(a100_export, tmp_path / "whole.sqlite")
    save_run(ResultsStore(tmp_db), result, profiler="nsys", nsys_mode="light", nsys_sqlite=str(export))
    _, checks = _checks(["health", "tiny-between"])
    assert checks["NVTX steps"]["Status"] == "warn"
    assert checks["NVTX steps"]["Evidence"].startswith(
        "the run was interrupted by SIGTERM, after 4 of its 10 measured steps (1–10); the other 6 never ran; "
        "the harness's ranges end at "
    ), checks["NVTX steps"]["Evidence"]


def test_a_capture_whose_last_step_lacks_a_range_counts_one_step(a100_export: Path, tmp_path: Path) -> None:
    """The same capture judged alone (no run stopped): one step of four lacks its backward range, said as
    one step, and the profiler is what to look at."""
    code, checks = _checks(["health", str(_cut(a100_export, tmp_path)), "--strict"])
    check = checks["NVTX steps"]
    assert code == 1
    assert check["Status"] == "fail"
    assert check["Evidence"].startswith(
        "1 of 4 measured steps lacks NVTX ranges: step 4 has no backward; the harness's ranges end at "
    ), check["Evidence"]
    assert "profiler that supports the program's CUDA" in check["What to do"]


def test_an_interrupted_run_under_nsys_says_the_health_that_health_run_says(
    tmp_db: str, a100_export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run --nsys` stopped by Ctrl-C in step 4 of its 10 measured steps, its export written: it said no
    health as it ended (its export was not read), while `harness health RUN` says the stop. Now it says the
    same health, not ok, and still exits 130."""
    import harness.profilers.nsys as profiler

    export = _cut(a100_export, tmp_path)
    fake = tmp_path / "nsys"
    fake.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && echo "NVIDIA Nsight Systems version 2023.4.4.54-1"\n'
        "[ \"$1\" = profile ] && printf '\\t--output=\\n\\t--export=\\n\\t--trace=\\n'\nexit 0\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("HARNESS_NSYS", str(fake))

    def launch(config: RunConfig, *args: Any, **kwargs: Any) -> tuple[Any, ProfileResult, list[str]]:
        result = _interrupted(args[2], 3)  # its run id
        result.config = config
        return result, ProfileResult(130, None, export, None, "", interrupted=signal.SIGINT), []

    monkeypatch.setattr(profiler, "launch", launch)
    run = ["run", "tiny", "--device", "cpu", "--warmup", "1", "--steps", "10", "--nsys", "--no-nsys-baseline"]
    shown = runner.invoke(app, [*run, "--profile-dir", str(tmp_path / "p"), "--format", "json"])
    assert shown.exit_code == 130, shown.output
    run_id = ResultsStore(tmp_db, readonly=True).runs()["run_id"].iloc[0]
    judged = json.loads(runner.invoke(app, ["health", run_id, "--format", "json"]).stdout)["health"]
    assert json.loads(shown.stdout)["health"] == judged
    assert {r["Check"]: r["Status"] for r in judged}["NVTX steps"] == "warn"
    said = runner.invoke(app, [*run, "--profile-dir", str(tmp_path / "p")])
    assert said.exit_code == 130 and "Traceback" not in said.output
    assert f"warning: health: 1 failure, 2 warnings of {len(judged)} checks" in flat(said.stderr)
    statuses = [r["Status"] for r in judged]
    assert (statuses.count("fail"), statuses.count("warn")) == (1, 2)


def test_one_measured_step_is_said_as_one(a100_export: Path, tmp_path: Path) -> None:
    """A capture whose `measured` range holds one step (steps 0–3 warm-up, step 4 measured): `1 measured
    step`, not `1 measured steps`, in the NVTX steps check."""
    ranged = with_harness_ranges(a100_export, tmp_path / "ranged.sqlite")
    one = derive(
        ranged,
        tmp_path / "one.sqlite",
        "UPDATE NVTX_EVENTS SET start = (SELECT start - 1000 FROM NVTX_EVENTS WHERE text = 'step' AND "
        "int64Value = 4) WHERE text = 'measured'",
    )
    _, checks = _checks(["health", str(one)])
    assert checks["NVTX steps"]["Status"] == "ok", checks["NVTX steps"]
    assert checks["NVTX steps"]["Evidence"] == "1 measured step (step 4), with step, forward, backward"


def test_a_capture_that_stopped_before_the_run_did_is_said_so_not_failed(
    tmp_db: str, a100_export: Path, tmp_path: Path
) -> None:
    """Ctrl-C stops nsys's recording before the run: its timers timed measured steps 1–6, its capture ends
    inside step 4. Steps 4–6 lack ranges because the profiler stopped first, not because it lost them: a
    warning that says so and counts right, and the findings of the steps it holds are ranked. It was
    "NVTX vs timers" failing ("NVTX ranges were lost … capture again with a profiler that supports the
    program's CUDA"), the findings refused, and "interrupted in step 4, after 6 of its 10 measured steps …
    the 5 measured steps after it never ran" although steps 5 and 6 ran."""
    result = _interrupted("tiny-early", 6)
    store = ResultsStore(tmp_db)
    save_run(store, result, profiler="nsys", nsys_mode="light", nsys_sqlite=str(_cut(a100_export, tmp_path)))
    code, checks = _checks(["health", "tiny-early", "--strict"])
    assert code == 0  # no check fails
    timers = checks["NVTX vs timers"]
    assert timers["Status"] == "warn"
    assert timers["Evidence"].startswith(
        "the run was interrupted by SIGINT and its profiler stopped recording before the run did: 3 of 6 "
        "timed measured steps, from step 4 on (no backward range), are not whole in the capture"
    ), timers["Evidence"]
    steps = checks["NVTX steps"]
    assert steps["Status"] == "warn"
    assert steps["Evidence"].startswith(
        "the run was interrupted by SIGINT, after 6 of its 10 measured steps (1–10); its capture ends before "
        "the run did (the profiler stopped recording first): step 4 has no backward range, and the run's "
        "steps 5–6 are not in it; the other 4 measured steps never finished; the harness's ranges end at "
    ), steps["Evidence"]
    advised = runner.invoke(app, ["advise", "tiny-early", "--format", "json"])
    assert advised.exit_code == 0 and "no findings ranked" not in advised.stderr
