"""`run --nsys` before and after the capture: the configuration is checked once, the export is read once,
and the run is stored once, with its agreement, health and findings, in one transaction; a reading cut
short still stores the run."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

from analysis.front import examine
from analysis.trace.opening import open_trace
from harness.core.records import RunConfig, RunResult, StepRecord
from harness.execution.nsys import NsysInfo, ProfileResult
from harness.profilers import nsys as profiler
from harness.store.results import ResultsStore
from harness.store.runs import RunsPart


def _capture(export: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No nsys: the capture 'leaves' `export` (the harness's own run of medium on an H100)."""
    info = NsysInfo(path=Path("/x/nsys"), version="2023.4.1.97", flags=frozenset(), source="t")
    monkeypatch.setattr(profiler.nsys, "find_nsys", lambda path: info)
    monkeypatch.setattr(profiler, "cuda_check", lambda *a, **k: [])

    def launch(
        config: RunConfig, request: Any, info: Any, run_id: str, progress: Any = None
    ) -> tuple[Any, Any, list[str]]:
        steps = [StepRecord(step=i, warmup=i < config.warmup,
                            phases={"forward": 9_000_000, "backward": 18_000_000, "optimizer": 2_000_000})
                 for i in range(config.warmup + config.steps)]  # fmt: skip
        result = RunResult(run_id=run_id, config=config, status="ok", device="cuda", device_name="H100",
                           steps=steps)  # fmt: skip
        return result, ProfileResult(0, None, export, None, ""), []

    monkeypatch.setattr(profiler, "launch", launch)


def _counted(monkeypatch: pytest.MonkeyPatch, *openers: Any) -> dict[str, int]:
    """The store's writes, and the openings of an export by the modules `openers`, counted as the real
    ones run."""
    counts = {"opened": 0, "written": 0}
    write = RunsPart._write

    def written(self: RunsPart, *args: Any, **kwargs: Any) -> None:
        counts["written"] += 1
        write(self, *args, **kwargs)

    def opened(path: Path, **how: Any) -> Any:
        counts["opened"] += 1
        return open_trace(path, **how)

    monkeypatch.setattr(RunsPart, "_write", written)
    for module in openers:
        monkeypatch.setattr(module, "open_trace", opened)
    return counts


def test_the_configuration_is_checked_once_and_its_device_resolved_once(
    h100_export: Path, tmp_path: Path, tmp_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.core import devices
    from harness.execution import checks

    _capture(h100_export, monkeypatch)
    calls: list[str] = []
    for name in ("validate", "check_layout", "check_device"):
        real = getattr(checks, name)
        monkeypatch.setattr(checks, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    resolve = devices.resolve_device

    def counted(requested: str) -> Any:
        calls.append("resolve_device")
        return resolve(requested)

    importlib.import_module("harness.cli.run")  # the command's modules loaded: each import of it replaced
    for module in [m for n, m in sys.modules.items() if n.startswith("harness")]:
        if getattr(module, "resolve_device", None) is resolve:
            monkeypatch.setattr(module, "resolve_device", counted)
    args = ["run", "medium", "--nsys", "--no-nsys-baseline", "--device", "cpu", "--warmup", "1", "--steps",
            "3", "--profile-dir", str(tmp_path / "p"), "--db", tmp_db]  # fmt: skip
    CliRunner().invoke(app, args)
    assert sorted(calls) == ["check_device", "check_layout", "resolve_device", "validate"]
    assert ResultsStore(tmp_db).count_runs() == 1  # and the run went on, trusting it


def test_the_export_is_read_once_and_the_run_stored_once(
    h100_export: Path, tmp_path: Path, tmp_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _capture(h100_export, monkeypatch)
    counts = _counted(monkeypatch, examine)
    store = ResultsStore(tmp_db)
    request = profiler.NsysOptions(profile_dir=tmp_path / "p", baseline=False)
    out = profiler.profile_run(RunConfig(model="medium", warmup=1, steps=3), request, store=store)
    assert counts == {"opened": 1, "written": 1}
    assert out.nvtx is not None and out.advice is not None
    run = ResultsStore(tmp_db).get(out.run_id)
    assert run.advice == out.advice and run.status == out.result.status  # health and status in the one write
    assert run.nsys_sqlite == str(h100_export)


def test_a_reading_cut_short_still_stores_the_run(
    h100_export: Path, tmp_path: Path, tmp_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the export is read: the run is stored once, as `interrupted`, and the outcome says so
    with the exit code of the signal."""
    _capture(h100_export, monkeypatch)
    counts = _counted(monkeypatch, examine)

    def interrupted(*args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(examine, "_timed_tables", interrupted)
    store = ResultsStore(tmp_db)
    request = profiler.NsysOptions(profile_dir=tmp_path / "p", baseline=False)
    out = profiler.profile_run(RunConfig(model="medium", warmup=1, steps=3), request, store=store)
    assert counts["written"] == 1
    assert ResultsStore(tmp_db).count_runs() == 1
    assert ResultsStore(tmp_db).get(out.run_id).status == "interrupted"
    assert out.exit_status == 130
    said = f"run {out.run_id} interrupted by SIGINT while its export was read; stored as interrupted"
    assert out.error == f"{said}; files kept: {h100_export}"


def test_profile_cmd_reads_the_export_once_and_stores_its_health_with_the_run(
    h100_export: Path, tmp_path: Path, tmp_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`profile -- CMD` after its capture takes the step `run --nsys` takes: the export read once (its
    tables, the capture's health and findings), then the run stored once with them."""
    from analysis.advice.health import capture_health
    from harness.experiments import program

    counts = _counted(monkeypatch, examine)
    info = NsysInfo(path=Path("/x/nsys"), version="2023.4.1.97", flags=frozenset(), source="t")
    monkeypatch.setattr(program.nsys, "find_nsys", lambda path: info)
    monkeypatch.setattr(
        program.nsys, "profile", lambda *a, **k: ProfileResult(0, h100_export, h100_export, None, "")
    )
    store = ResultsStore(tmp_db)
    out = program.profile_program(["true"], store=store, profile_dir=tmp_path / "p")
    assert counts == {"opened": 1, "written": 1}
    assert out.report is not None and out.report.tables
    with open_trace(h100_export) as trace:
        health = capture_health(trace)
    assert out.advice is not None and out.advice["health"]["worst"] == health.worst
    assert [c["name"] for c in out.advice["health"]["checks"]] == [c.name for c in health.checks]
    run = ResultsStore(tmp_db).get(out.run_id)
    assert run.advice == out.advice and run.status == out.result.status


def test_overhead_runs_under_nsys_are_stored_with_their_capture_s_health(
    h100_export: Path, tmp_path: Path, tmp_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`overhead`'s runs under nsys take the same step: each one's export read once for its capture's health
    and findings, stored once with its run."""
    from harness.experiments import overhead

    _capture(h100_export, monkeypatch)
    counts = _counted(monkeypatch, examine)

    def baseline(config: RunConfig) -> tuple[RunResult, None]:  # no workload: the run without nsys, made up
        steps = [StepRecord(step=i, warmup=i < config.warmup,
                            phases={"forward": 8_000_000, "backward": 17_000_000, "optimizer": 2_000_000})
                 for i in range(config.warmup + config.steps)]  # fmt: skip
        return RunResult(run_id="medium-base", config=config, status="ok", device="cuda", steps=steps), None

    monkeypatch.setattr(overhead, "run_baseline", baseline)
    store = ResultsStore(tmp_db)
    options = profiler.NsysOptions(profile_dir=tmp_path / "p")
    done = overhead.measure_overhead(RunConfig(model="medium", warmup=1, steps=3), profiler.PROFILER, options,
                                     repeats=1, modes=["light"], store=store)  # fmt: skip
    assert counts["opened"] == 1 and counts["written"] == 2  # the baseline and the run under nsys
    ((_, _, run),) = [r for r in done.runs if r[0] == "nsys light"]
    stored = ResultsStore(tmp_db).get(run.run_id)
    assert stored.advice is not None and stored.advice["health"]["checks"]
    assert stored.status == run.status and stored.nsys_sqlite == str(h100_export)


def test_overhead_runs_under_nsys_are_stored_with_their_agreement_as_run_nsys_stores_it(
    h100_export: Path, tmp_path: Path, tmp_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`overhead` stored its runs under nsys without the agreement of their NVTX ranges with their timers,
    which `run --nsys` stores: each is read as `run --nsys` reads its run, the same rows stored."""
    from harness.experiments import overhead

    _capture(h100_export, monkeypatch)

    def baseline(config: RunConfig) -> tuple[RunResult, None]:
        return RunResult(run_id="medium-base", config=config, status="ok", device="cuda", steps=[]), None

    monkeypatch.setattr(overhead, "run_baseline", baseline)
    store, config = ResultsStore(tmp_db), RunConfig(model="medium", warmup=1, steps=3)
    request = profiler.NsysOptions(profile_dir=tmp_path / "p", baseline=False)
    alone = store.get(profiler.profile_run(config, request, store=store).run_id)
    options = profiler.NsysOptions(profile_dir=tmp_path / "p")
    done = overhead.measure_overhead(
        config, profiler.PROFILER, options, repeats=1, modes=["light"], store=store
    )
    ((_, _, run),) = [r for r in done.runs if r[0] == "nsys light"]
    stored = ResultsStore(tmp_db).get(run.run_id)

    def rows(r: Any) -> list[tuple[Any, ...]]:
        return sorted((a.phase, a.steps, a.nvtx_mean_ns, a.timer_mean_ns, a.rel_diff) for a in r.agreement)

    assert [p for p, *_ in rows(stored)] == ["backward", "forward", "optimizer"]
    assert rows(stored) == rows(alone)
    assert {c["name"] for c in stored.advice["health"]["checks"]} == {
        c["name"] for c in alone.advice["health"]["checks"]
    }  # the run's own checks too (NVTX vs timers), as run --nsys judges its run
