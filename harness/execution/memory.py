"""A run's memory. Every run: peak allocated and reserved bytes and the analytic breakdown (parameters,
gradients, optimizer state, weight copies, activations, KV cache; workloads.memory). With `--memory`, what
happened during the measured steps: on CUDA the caching allocator's history, dumped as a snapshot pickle
(it loads in https://pytorch.org/memory_viz) with the phases' times beside it (JSON) for the dashboard's
timeline; on the CPU, torch.profiler with profile_memory=True and its operators by memory.

All of it goes to result.extra["memory"] (stored in the run's summary); the files also to
result.extra["artifacts"] (stored in the run's artifacts).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.devices import peak_reserved_bytes

if TYPE_CHECKING:
    from harness.core.records import RunConfig, RunResult

from workloads import memory as workload_memory

DEFAULT_DIR = Path("memory_profiles")
# what a CPU run's peak is: the whole process (interpreter, torch, data), not what torch allocated
RSS_SOURCE = "process peak resident set (no allocator statistics on the CPU)"
SNAPSHOT_SUFFIX = ".memory.pickle"
PHASES_SUFFIX = ".memory-phases.json"
MAX_ENTRIES = 1_000_000  # allocator events kept (a few hundred bytes each, with stacks)
TOP_OPERATORS = 15
BREAKDOWN_PARTS = ("parameters", "gradients", "optimizer_state", "weight_copies", "activations", "kv_cache")
# the line Kineto (torch.profiler's C++ side) writes to fd 2 as it starts and stops recording, e.g.
# "USDT:2026-12-01 04:14:34 10222:10222 SyncActivityProfilerHandler.cpp:52] profiler_start"; only a
# KINETO_LOG_LEVEL that also hides its errors keeps it back
KINETO_MARK = re.compile(
    rb"USDT:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ [\w.]+:\d+\] profiler_(start|stop)\r?\n?"
)


def breakdown(config: RunConfig, spec: Any, context: int) -> dict[str, int]:
    """workloads.memory's analytic breakdown for this configuration, as stored (bytes, and `params`)."""
    return workload_memory.memory_breakdown(
        spec,
        config.batch_size,
        context,
        config.precision,
        mode=config.mode,
        attention=config.attention,
        new_tokens=config.new_tokens if config.mode == "generate" else 0,
    ).to_dict()


def over_memory(
    config: RunConfig, spec: Any, context: int, device_type: str, total: int | None
) -> str | None:
    """The warning for a run whose analytic memory is more than all its device has (`total` bytes): it
    would run out of memory (CUDA), or the machine would (a CPU without swap), before a step is timed."""
    need = breakdown(config, spec, context)["total"]
    ranks = config.nproc if device_type == "cpu" else 1  # a GPU a rank; on the CPU they share the machine
    if total is None or need * ranks <= total:
        return None
    what = "a prompt of" if config.mode == "generate" else "a context of"
    where = {"cuda": "the GPU's", "cpu": "this machine's"}.get(device_type, f"the {device_type}'s")
    each = f" a rank, {need * ranks / 1024**3:,.1f} GiB for its {ranks} ranks," if ranks > 1 else ""
    return (
        f"{config.model} {config.mode} at batch {config.batch_size} and {what} {context:,} tokens needs "
        f"about {need / 1024**3:,.1f} GiB{each} by the analytic count (the memory table's `analytic: "
        f"total`), more than {where} {total / 1024**3:,.1f} GiB: it is likely to run out of memory"
    )


def record(result: RunResult, config: RunConfig, spec: Any, device: Any) -> None:
    """Peak allocated / reserved and the breakdown into result.extra["memory"] (kept beside --memory's)."""
    memory = result.extra.setdefault("memory", {})
    if device.type in ("cuda", "mps"):
        memory["peak_allocated_bytes"] = result.peak_memory_bytes
        memory["peak_reserved_bytes"] = peak_reserved_bytes(device)
        memory["peak_source"] = {"cuda": "CUDA caching allocator", "mps": "MPS driver"}[device.type]
    else:  # no allocator statistics on the CPU: the process's peak RSS, never under an allocator's label
        memory["peak_rss_bytes"] = result.peak_memory_bytes
        memory["peak_source"] = RSS_SOURCE
    if result.model is not None:
        memory["breakdown"] = breakdown(config, spec, result.model.context_length)


class MemoryRecorder:
    """`window()` goes around the measured steps (the runner's step window); `finish` stores what it saw."""

    def __init__(self, device: Any, run_id: str, folder: Path | None = None) -> None:
        self.device = device
        self.run_id = run_id
        self.folder = folder or DEFAULT_DIR
        self.snapshot: Path | None = None
        self.clock: tuple[int, int] | None = None  # (perf_counter_ns, time_ns) read together
        self.operators: list[dict[str, Any]] = []
        self.error: str | None = None

    @contextlib.contextmanager
    def window(self) -> Iterator[None]:
        if self.device.type == "cuda":
            with self._cuda_history():
                yield
        else:
            with self._cpu_profiler():
                yield

    @contextlib.contextmanager
    def _cuda_history(self) -> Iterator[None]:
        import torch

        self.folder.mkdir(parents=True, exist_ok=True)
        torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES)
        self.clock = (time.perf_counter_ns(), time.time_ns())
        try:
            yield
        finally:  # an interrupted run keeps the history of the steps it made
            torch.cuda.synchronize(self.device)
            path = self.folder / f"{self.run_id}{SNAPSHOT_SUFFIX}"
            try:
                torch.cuda.memory._dump_snapshot(str(path))
                self.snapshot = path
            except OSError as e:
                self.error = f"cannot write the memory snapshot {path}: {e.strerror}"
            torch.cuda.memory._record_memory_history(enabled=None)

    @contextlib.contextmanager
    def _cpu_profiler(self) -> Iterator[None]:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        with kineto_marks_dropped():
            prof.__enter__()
        try:
            yield
        finally:
            with kineto_marks_dropped():
                prof.__exit__(None, None, None)
        self.operators = operator_memory(prof.key_averages())

    def finish(self, result: RunResult) -> None:
        memory = result.extra.setdefault("memory", {})
        cuda = self.device.type == "cuda"
        memory["recorded"] = "CUDA allocator history" if cuda else "torch.profiler profile_memory"
        if self.error:
            memory["error"] = self.error
        if self.operators:
            memory["operators"] = self.operators
        if self.snapshot is None or self.clock is None:
            return
        phases = self.folder / f"{self.run_id}{PHASES_SUFFIX}"
        phases.write_text(json.dumps(phase_intervals(result, self.clock)))
        memory["snapshot"] = str(self.snapshot.resolve())
        result.extra.setdefault("artifacts", {}).update(
            memory_snapshot=str(self.snapshot.resolve()), memory_phases=str(phases.resolve())
        )


@contextlib.contextmanager
def kineto_marks_dropped() -> Iterator[None]:
    """Within the block, what is written to fd 2 is held back, then passed on without Kineto's lines
    that it started or stopped recording (KINETO_MARK): noise of torch's in a run's output, where every
    other line (an error of Kineto's too) is kept."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2: nothing to keep clean
        saved = None
    if saved is None:
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().splitlines(keepends=True) if not KINETO_MARK.fullmatch(line)]
            out = memoryview(b"".join(kept))
            while out:
                out = out[os.write(2, out) :]


def phase_intervals(result: RunResult, clock: tuple[int, int]) -> list[dict[str, Any]]:
    """Each measured step's phases as Unix-time nanosecond intervals (the snapshot's clock is Unix time):
    step, phase, start_ns, end_ns."""
    perf, unix = clock
    return [
        {
            "step": s.step,
            "phase": p,
            "start_ns": s.starts[p] - perf + unix,
            "end_ns": s.starts[p] - perf + unix + ns,
        }
        for s in result.steps
        if not s.warmup
        for p, ns in s.phases.items()
        if p in s.starts
    ]


def operator_memory(averages: Any) -> list[dict[str, Any]]:
    """torch.profiler's key averages as records, the operators that allocated most (self) first: the
    memory table of the CPU. Bytes summed over the measured steps; frees count negative."""
    rows = [
        {
            "name": e.key,
            "calls": int(e.count),
            "self_cpu_memory_bytes": int(e.self_cpu_memory_usage),
            "cpu_memory_bytes": int(e.cpu_memory_usage),
        }
        for e in averages
        if e.self_cpu_memory_usage or e.cpu_memory_usage
    ]
    rows.sort(key=lambda r: (-r["self_cpu_memory_bytes"], -r["cpu_memory_bytes"], r["name"]))
    return rows[:TOP_OPERATORS]
