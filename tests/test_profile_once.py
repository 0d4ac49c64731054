"""`run --nsys` after the capture (issue 33 §2): the export is read once, and the run is stored once, with its
agreement, health and findings, in one transaction; a reading cut short still stores the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis.trace.opening import open_trace
from harness.core.records import RunConfig, RunResult, StepRecord
from harness.execution.nsys import NsysInfo, ProfileResult
from harness.profilers import nsys as profiler
from harness.store.results import ResultsStore
from harness.store.runs import RunsPart


def _capture(export: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """No nsys: the capture 'leaves' `export` (the harness's own run of medium on an H100); counts the
    export's openings and the store's writes."""
    counts = {"opened": 0, "written": 0}
    info = NsysInfo(path=Path("/x/nsys"), version="2023.4.1.97", flags=frozenset(), source="t")
    monkeypatch.setattr(profiler.nsys, "find_nsys", lambda path: info)
    monkeypatch.setattr(profiler, "cuda_check", lambda *a, **k: [])

    def run_profiled(config: RunConfig, request: Any, info: Any, run_id: str) -> tuple[Any, Any, list[str]]:
        steps = [StepRecord(step=i, warmup=i < config.warmup,
                            phases={"forward": 9_000_000, "backward": 18_000_000, "optimizer": 2_000_000})
                 for i in range(config.warmup + config.steps)]  # fmt: skip
        result = RunResult(run_id=run_id, config=config, status="ok", device="cuda", device_name="H100",
                           steps=steps)  # fmt: skip
        return result, ProfileResult(0, None, export, None, ""), []

    def opened(path: Path, **how: Any) -> Any:
        counts["opened"] += 1
        return open_trace(path, **how)

    write = RunsPart._write

    def written(self: RunsPart, *args: Any, **kwargs: Any) -> None:
        counts["written"] += 1
        write(self, *args, **kwargs)

    monkeypatch.setattr(profiler, "run_profiled", run_profiled)
    monkeypatch.setattr(profiler, "open_trace", opened)
    monkeypatch.setattr(RunsPart, "_write", written)
    return counts


def test_the_export_is_read_once_and_the_run_stored_once(
    h100_export: Path, tmp_path: Path, tmp_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = _capture(h100_export, monkeypatch)
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
    counts = _capture(h100_export, monkeypatch)

    def interrupted(*args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(profiler, "analyse", interrupted)
    store = ResultsStore(tmp_db)
    request = profiler.NsysOptions(profile_dir=tmp_path / "p", baseline=False)
    with pytest.raises(KeyboardInterrupt):
        profiler.profile_run(RunConfig(model="medium", warmup=1, steps=3), request, store=store)
    assert counts["written"] == 1
    assert ResultsStore(tmp_db).count_runs() == 1
