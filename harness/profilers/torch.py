"""`harness run MODEL --profiler torch`: torch.profiler around the measured steps, in a fresh worker process.

The worker (harness.execution.worker) runs the workload with a `TorchHook`: the profiler's schedule skips
the warmup
steps (the last one warms the profiler up) and records the measured ones; every NVTX range the harness opens
(step, the phases, --nvtx-detail's layers) is also a `record_function` range of the same name. The trace is
written as gzipped Chrome JSON (opens in Perfetto; `harness summary|nvtx|dashboard` read it). This process
stores the run with the trace's path and computes the operator tables from the trace
(analysis.tables.operators).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core import machine, signals
from harness.core.records import RunConfig, RunResult, new_id
from harness.execution.worker import run_isolated
from harness.profilers.capture import examine_torch_trace, stored_after, stored_as, trace_complete
from workloads.names import DECODE

if TYPE_CHECKING:
    import pandas as pd

    from harness.store.results import ResultsStore, UnsavedRun

from harness.core.errors import UsageError
from harness.profilers import base, torch_hook
from harness.profilers.torch_hook import NAME, TRACE_SUFFIX, TorchHook, hook_for

__all__ = ["NAME", "TRACE_SUFFIX", "TorchHook", "TorchOptions", "TorchProfiledRun", "hook_for", "profile_run"]

TOP_OPERATORS = 15


@dataclass(frozen=True)
class TorchOptions(base.ProfilerOptions):
    """`run --profiler torch`'s options: torch.profiler's (the worker's hook gets them as `worker_spec`) and
    the operator table's order and length (`--sort`, `--top`)."""

    profile_dir: Path = Path("torch_profiles")
    record_shapes: bool = False
    with_stack: bool = False
    profile_memory: bool = False
    operator_sort: str | None = field(default=None, metadata={"cli": "sort"})  # None: self CPU, then CUDA
    operator_top: int | None = field(default=None, metadata={"cli": "top"})  # None: TOP_OPERATORS

    def worker_spec(self, trace: Path) -> dict[str, Any]:
        """What the worker needs to build its TorchHook (JSON)."""
        return {
            "name": NAME,
            "trace": str(trace),
            "record_shapes": self.record_shapes,
            "with_stack": self.with_stack,
            "profile_memory": self.profile_memory,
        }


@dataclass
class TorchProfiledRun(base.Outcome):
    run_id: str
    result: RunResult | None = None
    trace: Path | None = None
    trace_partial: bool = False  # the worker stopped while writing it: cut short, kept, not analysed
    operators: list[tuple[str, pd.DataFrame]] = field(default_factory=list)  # (title, table)
    ranges: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    exit_code: int = 1
    unsaved: list[str] = field(default_factory=list)

    @property
    def artifacts(self) -> dict[str, str]:
        if self.trace is None:
            return {}
        return {"trace_partial" if self.trace_partial else "trace": str(self.trace)}

    @property
    def kept(self) -> str:
        """ "; trace kept: …", or that it was cut short and kept unread; "" without one."""
        if self.trace is None:
            return ""
        if self.trace_partial:
            return f"; trace cut short, kept as partial (not analysed): {self.trace}"
        return f"; trace kept: {self.trace}"


def profile_run(
    config: RunConfig,
    options: TorchOptions,
    *,
    store: ResultsStore,
    progress: Callable[[str], None] | None = None,
    steps: Callable[[int], None] | None = None,
) -> TorchProfiledRun:
    """The run under torch.profiler in a fresh process, stored with its trace, then the operator tables."""

    base.check_writable(options.profile_dir)
    run_id = new_id(config.model)
    out = TorchProfiledRun(run_id=run_id)
    trace = options.profile_dir.resolve() / f"{run_id}{TRACE_SUFFIX}"
    if progress:
        progress("run under torch.profiler (fresh process)")
    with signals.deferred() as came:  # one that came as it ended all the same: stored, its trace not read
        result = run_isolated(
            config, run_id, profiler=options.worker_spec(trace), on_steps=steps, entry=torch_hook.__name__
        )
        late = signals.taken(came)
    out.result = result
    out.trace = trace if trace.exists() else None
    if out.trace is not None and result.status != "ok":
        out.trace_partial = not trace_complete(trace)
    how = {"profiler": NAME, "artifacts": out.artifacts}
    refused: list[UnsavedRun] = []
    with stored_after(store, result, out.unsaved, how, refused=refused) as found:  # once, after the trace
        if late is None:
            after_trace(out, trace, config, options, found, progress)
    if result.status == "interrupted":  # said once it is stored: where the run is
        out.error = f"run {out.run_id} {result.error}; {stored_as(result, refused)}{out.kept}"
    elif late is not None:
        why = signals.interrupted(late, f"as it ended {result.status}")
        out.error = f"run {out.run_id} {why}; {stored_as(result, refused)}{out.kept}"
        out.exit_code = signals.exit_code(late)
    return out


def after_trace(
    out: TorchProfiledRun, trace: Path, config: RunConfig, options: TorchOptions, found: dict[str, Any],
    progress: Callable[[str], None] | None = None,
) -> None:  # fmt: skip
    """How the run ended; then what its trace shows, read once (analysis.front.examine): the operator tables
    (whole run, or per phase in generate mode) and the phase ranges, the first `top` operators (default
    TOP_OPERATORS) by self CPU time and, with kernels, by self CUDA time, or one table ordered by the column
    `sort` names (`run --sort`, as `harness operators --sort`); the blocks of --nvtx-detail into `found`."""
    result = out.result
    assert result is not None
    kept = out.kept
    if result.status == "interrupted":  # the line is `profile_run`'s, once the run is stored
        out.exit_code = signals.exit_code(signals.signal_in(result.error))
        return
    if result.status == "error":
        out.error = f"run failed: {(result.error or 'no result').strip().splitlines()[-1]}{kept}"
        return
    if result.status == "oom":
        out.notes.append(f"out of memory: {result.error}; no analysis")
        return
    if out.trace is None:
        out.error = f"torch.profiler wrote no trace to {trace}"
        return
    top = options.operator_top or TOP_OPERATORS
    serving = result.extra.get("serving")
    if progress:
        progress(f"reading the trace ({out.trace.stat().st_size / 1e6:.1f} MB)")
    seen = examine_torch_trace(out.trace, config, top, options.operator_sort, serving is not None)
    out.ranges, out.operators = seen.nvtx, seen.operators
    out.error = seen.error  # also analysis's: --sort 'Self CUDA' on a trace without kernels
    out.notes += seen.notes
    found.update(seen.stored)
    if serving is not None and seen.busy.get(DECODE) is not None:  # a trace of the GPU: decode's busy share
        serving["decode_gpu_busy"] = seen.busy[DECODE]


class TorchProfiler(base.Profiler):
    name = NAME
    wraps = "the measured steps, with torch.profiler in the worker process"
    keeps = ("trace",)
    default_dir: Path | None = Path("torch_profiles")
    options_type = TorchOptions

    def check(self, config: RunConfig, device_type: str) -> None:
        if config.world_size > 1:
            raise UsageError("--profiler torch does not run across ranks yet: use --nsys with --nproc")
        if config.memory and device_type != "cuda":
            raise UsageError(
                "--memory on the CPU is torch.profiler's memory table: with --profiler torch, use "
                "--profile-memory"
            )

    def preflight(self, options: base.ProfilerOptions, device_type: str) -> list[str]:
        """A --sort by a CUDA column where the trace will hold no kernel: refused before the run. The sort
        is the operator table's column `check_sort` resolved it to, and each of its CUDA columns says CUDA
        in its name (Self CUDA, CUDA Total, …), as torch.profiler's do."""
        sort = getattr(options, "operator_sort", None)
        if sort is not None and "CUDA" in sort and device_type != "cuda":
            raise UsageError(
                f"--sort {sort.removesuffix(' (ns)')!r}: the trace of a run on {device_type} holds no CUDA "
                "kernel, so no CUDA column; sort by Self CPU, CPU Total, CPU Avg or Calls"
            )
        return []

    def progress(self, config: RunConfig) -> tuple[str, int | None]:
        return f"{config.model} {config.mode} under torch.profiler", config.warmup + config.steps

    def run(
        self, config: RunConfig, options: TorchOptions, *, store: ResultsStore, progress: base.Reporter
    ) -> TorchProfiledRun:
        return profile_run(config, options, store=store, progress=progress.stage, steps=progress.advance)

    def overhead_runs(
        self, config: RunConfig, options: TorchOptions, modes: list[str]
    ) -> list[tuple[str, base.ProfiledFn]]:
        """One (label, run): the worker under torch.profiler as `run --profiler torch` runs it, and its
        trace."""
        base.check_writable(options.profile_dir)

        def run() -> tuple[RunResult, dict[str, Any], list[str]]:
            run_id = new_id(config.model)
            trace = options.profile_dir.resolve() / f"{run_id}{TRACE_SUFFIX}"
            start = machine.snapshot()
            result = run_isolated(
                config, run_id, profiler=options.worker_spec(trace), entry=torch_hook.__name__
            )
            machine.keep_load(
                result.extra, start
            )  # one process, as the baseline: the CPU shares mean the same
            artifacts = {"trace": str(trace)} if trace.exists() else None
            return result, {"profiler": self.name, "artifacts": artifacts}, []

        return [(base.label_for("torch", self.name), run)]


PROFILER = TorchProfiler()
