"""`harness overhead`: one configuration without and with nsys, alternating, each in a fresh process."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from harness.profile import ProfileRequest, launch, report_paths
from harness.records import RunConfig, RunResult, phases_for
from harness.runner import new_run_id
from harness.sweep import run_isolated

if TYPE_CHECKING:
    import pandas as pd

    from harness.store import ResultsStore


@dataclass
class OverheadResult:
    experiment: str
    runs: list[tuple[str, int, RunResult]]  # label, repeat, result
    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)


def label_for(mode: str | None) -> str:
    return "no nsys" if mode is None else f"nsys {mode}"


def step_table(runs: list[tuple[str, int, RunResult]]) -> pd.DataFrame:
    """The measured steps' phase durations of (label, repeat, run) triples, what overhead_table reads."""
    import pandas as pd

    return pd.DataFrame(
        [
            (label, repeat, s.step, phase, ns)
            for label, repeat, r in runs
            for s in r.steps
            if not s.warmup
            for phase, ns in s.phases.items()
        ],
        columns=["label", "repeat", "step", "phase", "duration_ns"],
    )


def measure_overhead(
    config: RunConfig,
    request: ProfileRequest,
    *,
    repeats: int,
    modes: list[str],
    store: ResultsStore,
    progress: Callable[[str], None] | None = None,
) -> OverheadResult:
    from analysis.overhead import overhead_table
    from harness import nsys
    from harness.errors import HarnessError

    info = nsys.find_nsys(request.nsys_path)
    experiment = f"overhead-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    runs: list[tuple[str, int, RunResult]] = []
    notes: list[str] = []
    for repeat in range(repeats):
        # alternate so drift in the machine's speed hits both sides alike
        for mode in [None, *modes]:
            label = label_for(mode)
            if progress:
                progress(f"repeat {repeat + 1}/{repeats}: {label}")
            if mode is None:
                result = run_isolated(config)
                store.save(result, experiment=experiment)
            else:
                run_id = new_run_id(config.model)
                result, prof, run_notes = launch(config, replace(request, mode=mode), info, run_id)
                notes += [n for n in run_notes if n not in notes]
                store.save(
                    result, profiler="nsys", nsys_mode=mode, experiment=experiment, **report_paths(prof)
                )
            if result.status != "ok":
                raise HarnessError(f"{label} run {result.run_id} failed ({result.status}): {result.error}")
            runs.append((label, repeat, result))
    table = overhead_table(step_table(runs), phases_for(config.mode))
    return OverheadResult(experiment, runs, table, notes)
