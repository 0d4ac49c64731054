"""torch.compile's cost, kept apart from the steady state: the first step compiles (Dynamo traces, Inductor
generates and builds kernels), so it is always a warmup step, and its excess over the measured steps'
median is the compile time a run reports. (RunConfig makes the first step of a --compile run a warmup
step.)"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from analysis.compile import compile_comparison
from harness.core.records import RunResult

if TYPE_CHECKING:
    import pandas as pd

    from harness.store.results import ResultsStore


def record_first_step(result: RunResult) -> None:
    """The first step (wall time, and per phase) into result.extra, and with --compile `compile_ns`: the
    first step minus the median measured step (per phase too). Eager runs keep their first step as well, the
    warm-up cost compiled runs are compared with."""
    if not result.steps or not result.steps[0].warmup:
        return
    first = result.steps[0].phases
    result.extra["first_step_ns"] = sum(first.values())
    result.extra["first_step_phases"] = dict(first)
    measured = [s for s in result.steps if not s.warmup]
    if not result.config.compile or not measured:
        return
    steady = statistics.median(sum(s.phases.values()) for s in measured)
    result.extra["compile_ns"] = max(0, round(result.extra["first_step_ns"] - steady))
    result.extra["compile_phases_ns"] = {
        phase: max(0, round(ns - statistics.median(result.measured(phase)))) for phase, ns in first.items()
        if result.measured(phase)
    }  # fmt: skip


def compile_table(
    store: ResultsStore, *, model: str | None = None, device: str | None = None
) -> pd.DataFrame:
    """analysis.compile.compile_comparison over the stored runs (of one model / device)."""

    runs = store.runs(model=model, device=device)
    steps = store.step_timings(list(runs["run_id"])) if len(runs) else None
    if steps is None:
        import pandas as pd

        steps = pd.DataFrame(columns=["run_id", "step", "phase", "duration_ns", "warmup"])
    return compile_comparison(runs, steps)
