"""The measured steps of overhead experiments as tables, and how busy the machine was while they ran: what
`harness overhead` (nsys or torch.profiler) and `run --nsys`'s baseline comparison share."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from harness.core import machine
from harness.core.records import RunResult

if TYPE_CHECKING:
    import pandas as pd

from analysis.compare import overhead

DEFAULT_MAX_TIME = 600.0  # s: `harness overhead --ci-target` starts no round that would end later


def label_for(mode: str | None, profiler: str = "nsys") -> str:
    """The label of a run in an overhead table: the baseline (mode None), `nsys light|full`, or `torch`."""

    if mode is None:
        return overhead.baseline_label([profiler])
    return f"nsys {mode}" if profiler == "nsys" else profiler


def step_key(step: int, rank: int | None) -> int:
    """A step's key in an overhead table: in a run across ranks each rank's steps are steps of their own
    (a whole step is one rank's phases summed, never two ranks')."""
    return (rank or 0) * 1_000_000 + step


def step_table(runs: list[tuple[str, int, RunResult]]) -> pd.DataFrame:
    """The measured steps' phase durations of (label, repeat, run) triples, what overhead_table reads."""
    import pandas as pd

    return pd.DataFrame(
        [
            (label, repeat, step_key(s.step, s.rank), phase, ns)
            for label, repeat, r in runs
            for s in r.steps
            if not s.warmup
            for phase, ns in s.phases.items()
        ],
        columns=["label", "repeat", "step", "phase", "duration_ns"],
    )


def run_load(result: RunResult) -> machine.MachineLoad | None:
    data = result.extra.get("machine")
    return machine.MachineLoad.from_dict(data) if data else None


def experiment_load(runs: list[tuple[str, int, RunResult]]) -> machine.MachineLoad | None:
    """Load average before the first run and after the last; CPU shares of the runs without nsys."""
    loads = [load for _, _, r in runs if (load := run_load(r)) is not None]
    overall = machine.combine([x for x in loads if x.others_share is not None])
    if overall is None or not loads:
        return overall
    return replace(overall, load_before=loads[0].load_before, load_after=loads[-1].load_after)
