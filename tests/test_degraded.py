"""Runs and advice respect health: a run's own checks against its export (timed steps without NVTX ranges, a
CUDA run without kernels), a run stored as `degraded` (runs, show, diff and its gate, the dashboard), advise
refusing to rank the findings of a failed capture, and the health table fitted to the terminal.

The runs are h100-medium's own (its run.json: `harness show RUN --format json` of the run that made the
export, 5 warm-up and 10 measured steps), stored again pointing at the shared export or a broken copy of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import H100_DIR, SHARED_NSYS, need
from test_store import make_result
from typer.testing import CliRunner

from analysis.advice.record import degraded_reason
from analysis.dashboard.findings import findings_panel
from analysis.dashboard.panel import DashboardData
from analysis.dashboard.runs import with_labels
from harness.cli import app
from harness.core.records import ModelInfo, RunConfig, RunResult, StepRecord
from harness.experiments.advice import run_advice
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()
PHASES = ("forward", "backward", "optimizer")


def _h100_result(run_id: str, device: str = "cuda") -> RunResult:
    path = H100_DIR / "run.json"
    need(path)
    doc = json.loads(path.read_text())
    steps = [
        StepRecord(step=r["step"], warmup=r["warmup"], phases={p: int(r[f"{p} (ns)"]) for p in PHASES})
        for r in doc["steps"]
    ]
    return RunResult(
        run_id=run_id,
        config=RunConfig(model="medium", device=device, warmup=5, steps=10),
        status="ok",
        device=device,
        device_name="NVIDIA H100 80GB HBM3",
        model=ModelInfo("transformer", 1024, 4096, 24, 16, 10_000, 128, 423_183_360),
        steps=steps,
        tokens_per_s=4232.95,
    )


def _store_h100(store: ResultsStore, run_id: str, export: Path, **how: object) -> None:
    save_run(store, _h100_result(run_id), profiler="nsys", nsys_mode="light", nsys_sqlite=str(export), **how)


def _checks(args: list[str]) -> tuple[int, dict[str, dict]]:
    result = runner.invoke(app, [*args, "--format", "json"])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, {r["Check"]: r for r in json.loads(result.stdout)["health"]}


def test_health_run_names_the_first_timed_step_without_nvtx(
    tmp_db: str, broken_h100: dict[str, Path]
) -> None:
    """The run timed steps 5–14; its export's NVTX stops after step 2: the run fails NVTX vs timers at step
    5, with the time the harness's ranges end. The same run with the whole export passes."""
    store = ResultsStore(tmp_db)
    _store_h100(store, "medium-cut", broken_h100["nvtx-cut"])
    _store_h100(store, "medium-whole", H100_DIR / "report.sqlite")
    code, checks = _checks(["health", "medium-cut", "--strict"])
    assert code == 1
    assert checks["NVTX vs timers"]["Status"] == "fail"
    assert checks["NVTX vs timers"]["Evidence"] == (
        "10 of 10 timed measured steps lack NVTX ranges: step 5 is the first, with no NVTX range; the "
        "harness's ranges end at 18.497 s"
    )
    code, checks = _checks(["health", "medium-whole", "--strict"])
    assert code == 0, checks
    assert checks["NVTX vs timers"]["Status"] == "ok"
    assert checks["device"]["Evidence"] == "a cuda run with 30,528 kernels in its export"


def test_cuda_run_whose_export_has_no_kernels_fails(tmp_db: str) -> None:
    """A --device cuda run whose export holds CUDA API calls and not one kernel (weatherbench2's: 23 calls):
    the device check fails; a CPU run's export without kernels is what it should be."""
    weather = SHARED_NSYS / "ext" / "weatherbench2" / "report.sqlite"
    need(weather)
    store = ResultsStore(tmp_db)
    _store_h100(store, "medium-nokernels", weather)
    code, checks = _checks(["health", "medium-nokernels", "--strict"])
    assert code == 1 and checks["device"]["Status"] == "fail"
    assert checks["device"]["Evidence"] == (
        "a --device cuda run whose export holds no kernel (23 CUDA API calls): the profiler did not trace "
        "the GPU work"
    )
    cpu = SHARED_NSYS / "cpu-train" / "report.sqlite"
    save_run(store, make_result("tiny-cpu"), profiler="nsys", nsys_mode="light", nsys_sqlite=str(cpu))
    _, checks = _checks(["health", "tiny-cpu"])
    assert checks["device"] == {
        "Check": "device", "Status": "ok", "Evidence": "a cpu run: no GPU work to trace", "What to do": ""
    }  # fmt: skip


def _degraded(store: ResultsStore, run_id: str, export: Path) -> str:
    """Store the h100 run over `export` and mark it as `run --nsys` does when its capture fails."""
    _store_h100(store, run_id, export, baseline_run_id="medium-base", experiment="overhead-x")
    record = run_advice(store, run_id).record
    reason = degraded_reason(record)
    assert reason is not None
    store.save_advice(run_id, record, status="degraded", error=reason)
    return reason


def test_a_degraded_run_says_so_everywhere(tmp_db: str, broken_h100: dict[str, Path]) -> None:
    store = ResultsStore(tmp_db)
    base = _h100_result("medium-base")
    save_run(store, base, experiment="overhead-x")
    reason = _degraded(store, "medium-cut", broken_h100["kernels-cut"])
    assert reason.startswith(
        "its capture failed its health checks: GPU coverage: 9 of 10 measured steps (steps 6–14 of steps "
        "5–14)"
    )
    listed = json.loads(runner.invoke(app, ["runs", "--format", "json"]).stdout)
    assert {r["run_id"]: r["status"] for r in listed} == {"medium-base": "ok", "medium-cut": "degraded"}
    shown = runner.invoke(app, ["show", "medium-cut"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0
    first = shown.stderr.splitlines()[0]
    assert first == f"warning: run medium-cut stored as degraded: {reason}"
    assert "findings not ranked: the capture failed 1 health check (GPU coverage)" in shown.stderr
    info = json.loads(runner.invoke(app, ["show", "medium-cut", "--format", "json"]).stdout)["run"]
    assert info["status"] == f"degraded ({reason})"
    # its timers stand: the phase table of `show` keeps them
    phases = json.loads(runner.invoke(app, ["show", "medium-cut", "--format", "json"]).stdout)
    assert phases["phases (measured steps)"][1]["Avg (ns)"] == pytest.approx(38222882.3)
    diff = runner.invoke(app, ["diff", "medium-base", "medium-cut"], env={"COLUMNS": "200"})
    assert (
        diff.exit_code == 0 and "medium-cut is degraded: its capture failed its health checks" in diff.output
    )
    gated = runner.invoke(app, ["diff", "medium-base", "medium-cut", "--gate", "5"], env={"COLUMNS": "200"})
    assert gated.exit_code == 1
    assert "gate: medium-cut is degraded (its capture failed its health checks: GPU coverage" in gated.stderr
    runs = store.runs()
    assert with_labels(runs)["label"].str.endswith("(degraded)").tolist() == [False, True]
    panel = findings_panel(DashboardData(runs=runs))
    assert panel.figure is None and panel.missing.startswith(
        "run medium-cut: findings not ranked: the capture failed 1 health check (GPU coverage)"
    )


def test_advise_does_not_rank_the_findings_of_a_failed_capture(broken_h100: dict[str, Path]) -> None:
    path = broken_h100["kernels-cut"]
    refused = runner.invoke(app, ["advise", str(path)], env={"COLUMNS": "200"})
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert refused.stdout == ""
    said = "error: GPU coverage (fail): 9 of 10 measured steps (steps 6–14 of steps 5–14) launch"
    assert said in refused.stderr
    assert "no findings ranked for kernels-cut.sqlite: its capture failed 1 health check (GPU coverage)" in (
        refused.stderr.replace("\n", " ")
    )
    anyway = runner.invoke(app, ["advise", str(path), "--ignore-health"], env={"COLUMNS": "200"})
    assert anyway.exit_code == 0
    assert "Findings in kernels-cut.sqlite, largest time at stake first (untrusted)" in anyway.stdout
    assert (
        "warning: untrusted: the capture of kernels-cut.sqlite failed 1 health check (GPU coverage)"
        in anyway.stderr
    )
    whole = runner.invoke(app, ["advise", str(H100_DIR / "report.sqlite"), "--format", "json"])
    assert whole.exit_code == 0 and json.loads(whole.stdout)["findings"][0]["Rule"] == "gpu-host-wait"


def test_health_table_keeps_sentences_whole_at_80_columns(tmp_db: str) -> None:
    """COLUMNS=80: no empty "What to do" column squeezed beside the evidence, no evidence cut mid-word; a
    run's checks with something to do show it (folded into the evidence), as an export's would."""
    cpu = SHARED_NSYS / "cpu-train" / "report.sqlite"
    need(cpu)
    shown = runner.invoke(app, ["health", str(cpu)], env={"COLUMNS": "80"})
    assert shown.exit_code == 0
    assert "What" not in shown.stdout and "…" not in shown.stdout
    # the evidence line the issue saw cut: every word of it there, wherever the cell wraps
    assert all(word in shown.stdout.split() for word in ["(10,908", "osrt,", "32", "nvtx)"])
    store = ResultsStore(tmp_db)
    base, prof = make_result("tiny-base"), make_result("tiny-prof", fwd=1_300_000)
    save_run(store, base, experiment="overhead-x")
    save_run(
        store, prof, profiler="nsys", nsys_mode="light", nsys_sqlite=str(cpu), baseline_run_id="tiny-base"
    )
    latest = runner.invoke(app, ["health", "latest"], env={"COLUMNS": "80"})
    assert "Evidence, what to do" in latest.stdout and "…" not in latest.stdout
    flat = " ".join(line.strip("│ ") for line in latest.stdout.splitlines())
    assert "What to do: compare phase times only" in " ".join(flat.split())


def test_a_program_run_is_not_called_a_run_on_some_device(tmp_db: str) -> None:
    """`harness profile -- CMD` records no device (the program chose its own): the device check says so."""
    from harness.experiments.program import NOT_APPLICABLE, program_config

    cpu = SHARED_NSYS / "cpu-train" / "report.sqlite"
    need(cpu)
    store = ResultsStore(tmp_db)
    save_run(store, RunResult("prog-1", program_config("prog"), "ok", device=NOT_APPLICABLE), profiler="nsys",
               nsys_mode="light", nsys_sqlite=str(cpu))  # fmt: skip
    _, checks = _checks(["health", "prog-1"])
    assert checks["device"] == {
        "Check": "device",
        "Status": "ok",
        "Evidence": "device not recorded",
        "What to do": "",
    }


def test_a_capture_without_nvtx_says_so_once() -> None:
    """A run captured without NVTX (`--nsys-arg=--trace=osrt`): its health check NVTX vs timers fails and the
    run is degraded, which the health line says; reading the NVTX tables adds no error of its own."""
    from harness.profilers.capture import examine_run

    export = need(SHARED_NSYS / "ext" / "beast1" / "report.sqlite")  # a GPU capture without NVTX
    seen = examine_run(export, _h100_result("medium-osrt"), None, "light", "2022.4", [])
    assert seen.error is None and seen.nvtx is None, seen.error
    assert seen.advice is not None and degraded_reason(seen.advice) is not None
    checks = {c["name"]: c for c in seen.advice["health"]["checks"]}
    assert checks["NVTX vs timers"]["status"] == "fail"
    assert "no NVTX data" not in " ".join(seen.notes)
