"""The run without a profiler ("none"): the workload in this process (or its ranks under torchrun), timed by
its own clocks, and stored."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core import signals
from harness.core.errors import UsageError
from harness.core.records import RunConfig, RunResult
from harness.execution.ranks.multirank import run_ranks
from harness.execution.runner import run_workload
from harness.profilers.base import Outcome, ProfiledFn, Profiler, ProfilerOptions, Reporter
from harness.profilers.capture import save_once, stored_as
from harness.store.results import UnsavedRun

if TYPE_CHECKING:
    from harness.store.results import ResultsStore


@dataclass
class PlainRun(Outcome):
    run_id: str
    result: RunResult
    refused: list[UnsavedRun] = field(default_factory=list)  # the store's: the run is in a file
    error: str | None = None
    exit_code: int = 1

    @property
    def unsaved(self) -> list[str]:
        return [str(e) for e in self.refused]


class NoProfiler(Profiler):
    name = "none"
    wraps = "nothing: the measured steps in this process (torchrun's ranks with --nproc), timed in-process"
    keeps: tuple[str, ...] = ()  # --memory's snapshot goes to --profile-dir, if given
    default_dir: Path | None = None

    def overhead_runs(
        self, config: RunConfig, options: ProfilerOptions, modes: list[str]
    ) -> list[tuple[str, ProfiledFn]]:
        raise UsageError("the run without a profiler is the overhead's baseline: name a profiler")

    def progress(self, config: RunConfig) -> tuple[str, int | None]:
        if config.world_size > 1:  # counts the steps of the slowest rank on this machine
            return f"{config.model} {config.mode} across {config.world_size} ranks (torchrun)", (
                config.warmup + config.steps
            )
        return f"{config.model} {config.mode}", config.warmup + config.steps

    def run(
        self, config: RunConfig, options: ProfilerOptions, *, store: ResultsStore, progress: Reporter
    ) -> PlainRun:
        late: int | None = None
        if config.world_size > 1:
            progress.stage(f"{config.nproc} ranks on this machine")
            with signals.deferred() as came:  # one that came as every rank ended: the run kept as it ended
                result = run_ranks(config, on_steps=progress.advance)
                late = signals.taken(came)
        else:
            result = run_workload(config, progress=progress.advance, memory_dir=options.profile_dir)
        out = PlainRun(run_id=result.run_id, result=result)
        if refusal := save_once(store, result):
            out.refused.append(refusal)
        if late is not None and result.status in ("ok", "oom"):  # stored, then the signal's exit code
            why = signals.interrupted(late, f"as its ranks ended {result.status}")
            out.error = f"run {result.run_id} {why}; {stored_as(result, out.refused)}"
            out.exit_code = signals.exit_code(late)
        return out


PROFILER = NoProfiler()
