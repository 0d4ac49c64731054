"""A run is examined once: a torch.profiler trace read once with its blocks, a run's facts the same whether
it was just measured or is read back from the results database, a wrong stats format refused before a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kineto_data import write_trace
from test_blocks import _annotation
from test_profile_once import _capture

from analysis.trace.trace import Trace
from harness.core.errors import UsageError
from harness.core.records import RunConfig, RunResult, StepRecord
from harness.profilers import capture
from harness.profilers import nsys as profiler
from harness.profilers.capture import save as save_run
from harness.profilers.torch import TorchOptions, profile_run
from harness.store.results import ResultsStore

PHASES = {"forward": 60_000, "backward": 30_000, "optimizer": 10_000}


def _opened(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every trace opened from now on, whoever opens it."""
    opened: list[Path] = []
    init = Trace.__init__

    def counted(self: Trace, path: Path, *args: Any, **kwargs: Any) -> None:
        opened.append(Path(path))
        init(self, path, *args, **kwargs)

    monkeypatch.setattr(Trace, "__init__", counted)
    return opened


def _torch_trace(path: Path) -> None:
    """One measured step of a --nvtx-detail run as torch.profiler writes it: its phases and blocks as
    record_function ranges, two operators in its forward (times in µs)."""
    events = [_annotation("step", 0, 100), _annotation("forward", 1, 60), _annotation("layer_0", 2, 30),
              _annotation("attention", 3, 20), _annotation("qkv_proj", 4, 10), _annotation("lm_head", 40, 8),
              _annotation("backward", 62, 30), _annotation("optimizer", 93, 6)]  # fmt: skip
    for name, ts, dur in (("aten::mm", 5, 4), ("aten::add", 41, 2)):
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur})
    write_trace(path, events)


def test_a_torch_run_reads_its_trace_once_and_stores_its_blocks_with_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def worker(config: RunConfig, run_id: str, profiler: dict, **_: object) -> RunResult:
        _torch_trace(Path(profiler["trace"]))
        return RunResult(run_id=run_id, config=config, status="ok", steps=[StepRecord(5, False, PHASES)])

    monkeypatch.setattr("harness.profilers.torch.run_isolated", worker)
    opened = _opened(monkeypatch)
    store = ResultsStore(str(tmp_path / "r.sqlite"))
    config = RunConfig(model="tiny", warmup=5, steps=1, nvtx_detail=True)
    out = profile_run(config, TorchOptions(profile_dir=tmp_path / "p"), store=store)
    assert out.error is None and opened == [out.trace]  # the trace read once: tables and blocks
    assert [title for title, _ in out.operators] == ["top 15 operators by self CPU"]
    assert set(out.operators[0][1]["Name"]) == {"aten::mm", "aten::add"}
    blocks = store.block_timings([out.run_id]).set_index("block")
    assert set(blocks["source"]) == {"torch-trace"} and set(blocks["step"]) == {5}
    assert blocks.loc["qkv_proj", "duration_ns"] == 10_000 and blocks.loc["lm_head", "duration_ns"] == 8_000


def test_a_run_says_the_same_of_itself_measured_and_stored(tmp_db: str) -> None:
    """The facts the run's own checks judge, made by one function from the run just measured and from the
    run read back from the results database: the same."""
    from analysis.front.examine import compared, run_facts
    from harness.experiments.advice import stored_facts

    def result(run_id: str, forward: int, machine: dict[str, Any]) -> RunResult:
        steps = [StepRecord(i, i < 1, {"forward": forward + 1_000 * i, "backward": 2 * forward}, rank=r)
                 for r in (0, 1) for i in range(4)]  # fmt: skip
        config = RunConfig(model="tiny", warmup=1, steps=3, nproc=2)
        return RunResult(run_id=run_id, config=config, status="ok", steps=steps, extra={"machine": machine})

    load = {"cpus": 2, "seconds": 10.0, "load_before": 3.0, "load_after": 3.5, "others_share": 0.4,
            "own_share": 0.5}  # fmt: skip
    base, run = (
        result("tiny-base", 1_000_000, load),
        result("tiny-nsys", 1_200_000, {**load, "others_share": None}),
    )
    store = ResultsStore(tmp_db)
    save_run(store, base)
    save_run(store, run, profiler="nsys", nsys_mode="light", baseline_run_id=base.run_id)
    notes: list[str] = []
    measured = capture.measured(run, base, "light", "2023.4", notes)
    live = run_facts(measured, overhead=compared(measured)[1])
    stored = stored_facts(store, store.get(run.run_id))
    assert live.overhead is not None and live.overhead.effect_pct == pytest.approx(
        100 * (3_602_000 / 3_002_000 - 1)
    )
    assert stored.overhead == live.overhead
    assert stored.timed == live.timed == {1: ["forward", "backward"], 2: ["forward", "backward"],
                                          3: ["forward", "backward"]}  # fmt: skip
    assert stored.ranks_seen == live.ranks_seen == [0, 1] and stored.world_size == live.world_size == 2
    assert stored.busy == live.busy and live.busy and stored.device == live.device == "cpu"
    assert notes and notes[0].startswith("the machine was busy during the baseline run")


def test_a_wrong_stats_format_is_refused_before_the_run(
    h100_export: Path, tmp_path: Path, tmp_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _capture(h100_export, monkeypatch)
    ran: list[str] = []
    monkeypatch.setattr(profiler, "run_baseline", lambda config: ran.append("baseline"))
    monkeypatch.setenv("HARNESS_STATS_FORMAT", "newest")
    request = profiler.NsysOptions(profile_dir=tmp_path / "p")
    with pytest.raises(UsageError, match="HARNESS_STATS_FORMAT=newest"):
        profiler.profile_run(
            RunConfig(model="medium", warmup=1, steps=3), request, store=ResultsStore(tmp_db)
        )
    assert ran == [] and ResultsStore(tmp_db).count_runs() == 0
