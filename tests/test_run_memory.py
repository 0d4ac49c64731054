"""A run's memory: peaks and the analytic breakdown on every run (checked against the real tensors),
--memory's CPU table for real, and the CUDA snapshot's timeline from a snapshot made by hand in the
documented format (torch.cuda.memory._snapshot: segments + device_traces)."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import workloads
from analysis.dashboard.memory import memory_panel
from analysis.dashboard.panel import DashboardData
from analysis.errors import AnalysisError
from analysis.runs.memory import memory_timeline, phase_peaks, read_snapshot
from harness.cli import app
from harness.core.records import RunConfig, RunResult, StepRecord
from harness.execution.memory import KINETO_MARK, MemoryRecorder, kineto_marks_dropped, phase_intervals
from harness.execution.runner import run_workload
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()
SMALL = {"batch_size": 2, "context_length": 16, "warmup": 1, "steps": 2, "device": "cpu"}


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def test_every_run_records_peaks_and_the_breakdown_of_its_real_tensors() -> None:
    config = RunConfig("char", **SMALL)
    result = run_workload(config)
    memory = result.extra["memory"]
    assert memory["peak_rss_bytes"] == result.peak_memory_bytes > 0
    # no allocator statistics on the CPU: the RSS is never stored under an allocator's name
    assert "peak_allocated_bytes" not in memory and "peak_reserved_bytes" not in memory
    assert "resident set" in memory["peak_source"]
    # the same model and optimizer the runner builds, measured: parameters, gradients, AdamW's state
    spec = workloads.get_spec("char").with_overrides(context_length=16)
    model = workloads.build_model(spec, attention="sdpa", seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    x, y = workloads.synthetic_batch(spec, 2, 16, generator=torch.Generator().manual_seed(0))
    workloads.loss_fn(model(x), y).backward()
    grads = nbytes(p.grad for p in model.parameters())
    opt.step()
    state = nbytes(t for s in opt.state.values() for t in s.values())
    parts = memory["breakdown"]
    assert parts["parameters"] == nbytes(model.parameters())
    assert parts["gradients"] == grads
    assert parts["optimizer_state"] == state
    assert parts["activations"] > 0 and parts["kv_cache"] == 0 and parts["weight_copies"] == 0
    assert parts["total"] == sum(parts[k] for k in parts if k not in ("params", "total"))


def test_generate_breakdown_holds_the_kv_cache() -> None:
    config = RunConfig("char", mode="generate", new_tokens=4, **SMALL)
    parts = run_workload(config).extra["memory"]["breakdown"]
    spec = workloads.get_spec("char")
    cache = workloads.new_cache(workloads.build_model(spec), 2, 16 + 4 - 1, device=torch.device("cpu"))
    assert parts["kv_cache"] == nbytes([*cache.k, *cache.v])
    assert parts["gradients"] == parts["optimizer_state"] == parts["activations"] == 0


def test_a_run_needing_more_memory_than_its_device_has_is_warned_of_before_it_starts() -> None:
    """tiny at a context of 100,000 tokens needs ~89 GiB by the analytic count; on a 24 GB CPU without swap
    it ran for minutes, the machine near its end, before anything said why."""
    from harness.execution.checks import checked, run_spec
    from harness.execution.memory import breakdown, over_memory

    config = RunConfig("tiny", context_length=100_000, device="cpu")
    spec = run_spec(config)
    need = breakdown(config, spec, 100_000)["total"]
    assert over_memory(config, spec, 100_000, "cpu", need) is None  # all it needs fits
    line = over_memory(config, spec, 100_000, "cpu", 24 * 1024**3)
    assert line == (
        f"tiny train at batch 4 and a context of 100,000 tokens needs about {need / 1024**3:,.1f} GiB by "
        "the analytic count (the memory table's `analytic: total`), more than this machine's 24.0 GiB: it is "
        "likely to run out of memory"
    )
    assert 80 * 1024**3 < need < 100 * 1024**3
    gen = RunConfig("tiny", mode="generate", new_tokens=2, device="cuda")
    on_gpu = over_memory(gen, run_spec(gen), 64, "cuda", 64 * 1024**2) or ""
    assert "a prompt of 64 tokens" in on_gpu and "more than the GPU's 0.1 GiB" in on_gpu
    ranks = RunConfig("tiny", context_length=100_000, device="cpu", nproc=2)  # two on one machine's memory
    gib = need / 1024**3
    assert over_memory(ranks, spec, 100_000, "cpu", need) == (
        f"tiny train at batch 4 and a context of 100,000 tokens needs about {gib:,.1f} GiB a rank, "
        f"{2 * gib:,.1f} GiB for its 2 ranks, by the analytic count (the memory table's `analytic: total`), "
        f"more than this machine's {gib:,.1f} GiB: it is likely to run out of memory"
    )
    # checked() warns with the device's own memory: a context no machine holds, and none for a small run
    (huge,) = checked(RunConfig("tiny", context_length=100_000_000, device="cpu")).warnings
    assert huge.startswith("tiny train at batch 4 and a context of 100,000,000 tokens needs about")
    assert checked(RunConfig("char", **SMALL)).warnings == []


def test_memory_on_cpu_prints_the_operators_table_and_show_keeps_it(tmp_db: str) -> None:
    args = ["run", "char", "--memory", "--format", "json", *_flags(SMALL)]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    tables = json.loads(result.stdout)
    (title,) = [t for t in tables if t.startswith("top operators by CPU memory")]
    ops = tables[title]
    assert ops and all(r["operator"].startswith("aten::") for r in ops)
    assert ops[0]["self CPU mem (MiB)"] > 0
    memory = {r["memory"]: r["MiB"] for r in next(v for k, v in tables.items() if k.startswith("memory"))}
    assert memory["peak RSS (process)"] > 0 and memory["analytic: parameters"] > 0
    assert "peak allocated" not in memory and "peak reserved" not in memory
    (run,) = ResultsStore(tmp_db).runs().to_dict("records")
    shown = json.loads(runner.invoke(app, ["show", run["run_id"], "--format", "json"]).stdout)
    assert [t for t in shown if t.startswith("top operators by CPU memory")]
    shown_memory = {r["memory"] for r in next(v for k, v in shown.items() if k.startswith("memory"))}
    assert shown_memory >= {"peak RSS (process)", "analytic: optimizer state"}
    assert "peak allocated" not in shown_memory
    fields = shown["run"]
    assert fields["peak RSS (process) (MiB)"] == run["peak_memory_bytes"] / 2**20
    assert "peak memory (MiB)" not in fields


def test_memory_on_cpu_keeps_kinetos_start_and_stop_lines_out_of_the_output(
    capfd: pytest.CaptureFixture,
) -> None:
    """--memory on the CPU runs torch.profiler in the harness's process: Kineto wrote "USDT:… profiler_start"
    and "… profiler_stop" to its stderr (fd 2) around the run's output. Only those lines are dropped."""
    from torch.profiler import ProfilerActivity, profile

    recorder = MemoryRecorder(torch.device("cpu"), "run-1")
    with recorder.window():
        torch.ones(1024, 1024).sum()
    assert recorder.operators  # recorded as before
    err = capfd.readouterr().err
    assert "profiler_start" not in err and "profiler_stop" not in err, err
    with kineto_marks_dropped():  # what else comes to fd 2 meanwhile is passed on, in order
        os.write(2, b"error: a line of its own\n")
        with profile(activities=[ProfilerActivity.CPU]):
            os.write(2, b"USDT: not a mark of Kineto's\n")
    assert capfd.readouterr().err == "error: a line of its own\nUSDT: not a mark of Kineto's\n"
    assert KINETO_MARK.fullmatch(
        b"USDT:2026-12-01 04:14:34 10222:10222 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
    )


def test_memory_with_torch_profiler_on_cpu_is_a_usage_error(tmp_db: str) -> None:
    result = runner.invoke(app, ["run", "char", "--memory", "--profiler", "torch", *_flags(SMALL)])
    assert result.exit_code == 2
    assert "use --profile-memory" in result.output and "Traceback" not in result.output


def _flags(options: dict) -> list[str]:
    return [x for k, v in options.items() for x in (f"--{k.replace('_', '-')}", str(v))]


# --- the CUDA snapshot, by hand in its documented shape ------------------------------------------------

US = 1_000  # ns per µs


def snapshot() -> dict:
    """1 KiB allocated before recording began (still allocated at the end), then a forward that allocates
    2 KiB and 512 B, a backward that frees the 2 KiB (requested, then completed) and allocates 4 KiB."""
    trace = [
        {"action": "segment_alloc", "addr": 0, "size": 2**20, "stream": 0, "time_us": 1_000, "frames": []},
        {"action": "alloc", "addr": 4096, "size": 2048, "stream": 0, "time_us": 1_010, "frames": []},
        {"action": "alloc", "addr": 8192, "size": 512, "stream": 0, "time_us": 1_020, "frames": []},
        {"action": "free_requested", "addr": 4096, "size": 2048, "stream": 0, "time_us": 1_110, "frames": []},
        {"action": "free_completed", "addr": 4096, "size": 2048, "stream": 0, "time_us": 1_111, "frames": []},
        {"action": "alloc", "addr": 12288, "size": 4096, "stream": 0, "time_us": 1_120, "frames": []},
        {"action": "alloc", "addr": 20480, "size": 256, "stream": 0, "time_us": 1_500, "frames": []},
    ]
    at_end = 1024 + 512 + 4096 + 256
    segment = {"device": 0, "address": 0, "total_size": 2**20, "allocated_size": at_end, "blocks": []}
    return {"segments": [segment], "device_traces": [trace]}


PHASES = pd.DataFrame(
    [
        {"step": 1, "phase": "forward", "start_ns": 1_005 * US, "end_ns": 1_100 * US},
        {"step": 1, "phase": "backward", "start_ns": 1_100 * US, "end_ns": 1_200 * US},
    ]
)


def test_timeline_from_a_snapshot() -> None:
    t = memory_timeline(snapshot(), PHASES)
    assert list(t["action"]) == ["alloc", "alloc", "free_completed", "alloc", "alloc"]
    # starts at the 1 KiB allocated before recording: the level at the end minus what the trace added
    assert list(t["allocated_bytes"]) == [1024 + 2048, 1024 + 2560, 1024 + 512, 1024 + 4608, 1024 + 4864]
    assert list(t["phase"]) == ["forward", "forward", "backward", "backward", None]
    assert list(t["time_ns"]) == [1_010 * US, 1_020 * US, 1_111 * US, 1_120 * US, 1_500 * US]
    peaks = phase_peaks(t).set_index("phase")
    assert peaks.loc["forward", "peak_bytes"] == 3584 and peaks.loc["forward", "net_bytes"] == 2560
    assert peaks.loc["backward", "peak_bytes"] == 5632 and peaks.loc["backward", "net_bytes"] == 2048


def test_snapshot_without_times_or_phases_still_gives_a_timeline() -> None:
    snap = snapshot()
    for e in snap["device_traces"][0]:
        del e["time_us"]
    t = memory_timeline(snap)
    assert t["time_ns"].isna().all() and t["phase"].isna().all() and len(t) == 5


def test_read_snapshot_errors_are_one_line(tmp_path) -> None:
    with pytest.raises(AnalysisError, match="no memory snapshot at"):
        read_snapshot(tmp_path / "gone.pickle")
    (tmp_path / "other.pickle").write_bytes(pickle.dumps({"not": "a snapshot"}))
    with pytest.raises(AnalysisError, match="not a CUDA memory snapshot"):
        read_snapshot(tmp_path / "other.pickle")
    (tmp_path / "junk.pickle").write_bytes(b"junk")
    with pytest.raises(AnalysisError, match="cannot read memory snapshot"):
        read_snapshot(tmp_path / "junk.pickle")


def test_phase_intervals_put_the_timers_on_the_unix_clock() -> None:
    steps = [
        StepRecord(0, True, {"forward": 10}, {"forward": 100}),
        StepRecord(1, False, {"forward": 50, "backward": 70}, {"forward": 200, "backward": 260}),
    ]
    result = RunResult("r", RunConfig("tiny"), "ok", steps=steps)
    # perf_counter read 150 when the Unix clock read 1,000,000
    got = phase_intervals(result, (150, 1_000_000))
    assert got == [
        {"step": 1, "phase": "forward", "start_ns": 1_000_050, "end_ns": 1_000_100},
        {"step": 1, "phase": "backward", "start_ns": 1_000_110, "end_ns": 1_000_180},
    ]


def test_recorder_finish_names_the_files_as_artifacts(tmp_path) -> None:
    """What finish() stores once the CUDA window dumped a snapshot (the dump itself needs a GPU)."""
    rec = MemoryRecorder(torch.device("cuda"), "run-1", tmp_path)
    rec.snapshot, rec.clock = tmp_path / "run-1.memory.pickle", (0, 0)
    rec.snapshot.write_bytes(pickle.dumps(snapshot()))
    result = RunResult(
        "run-1", RunConfig("tiny"), "ok", steps=[StepRecord(1, False, {"forward": 5}, {"forward": 1})]
    )
    rec.finish(result)
    files = result.extra["artifacts"]
    assert files["memory_snapshot"] == str(rec.snapshot.resolve())
    assert json.loads(Path(files["memory_phases"]).read_text()) == [
        {"step": 1, "phase": "forward", "start_ns": 1, "end_ns": 6}
    ]
    assert result.extra["memory"]["recorded"] == "CUDA allocator history"


def test_memory_panel_draws_the_newest_snapshot_by_phase(tmp_path, tmp_db: str) -> None:
    snap, phases = tmp_path / "r.memory.pickle", tmp_path / "r.memory-phases.json"
    snap.write_bytes(pickle.dumps(snapshot()))
    phases.write_text(PHASES.to_json(orient="records"))
    store = ResultsStore(tmp_db)
    result = RunResult("tiny-mem", RunConfig("tiny", device="cuda"), "ok", device="cuda", device_name="H100")
    result.extra["artifacts"] = {"memory_snapshot": str(snap), "memory_phases": str(phases)}
    save_run(store, result)
    runs = store.runs()
    assert runs.loc[0, "artifacts"] == result.extra["artifacts"]  # the run's own files are stored
    panel = memory_panel(DashboardData(runs=runs))
    line = panel.figure.data[0]
    assert list(line.y * 2**20) == [3072, 3584, 1536, 5632, 5888]
    assert list(line.x) == pytest.approx([0.0, 0.01, 0.101, 0.11, 0.49])  # ms from the first event
    assert {s.fillcolor for s in panel.figure.layout.shapes} == {"#4C78A8", "#F58518"}  # forward, backward
    assert [t.name for t in panel.figure.data[1:]] == ["forward", "backward"]
    assert any(n.startswith("forward: peak") for n in panel.notes)
    snap.unlink()
    assert memory_panel(DashboardData(runs=runs)).missing.startswith("run tiny-mem: no memory snapshot at")
    assert memory_panel(DashboardData()).missing.startswith("no run with a memory snapshot")
