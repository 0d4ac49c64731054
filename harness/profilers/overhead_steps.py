"""How overhead experiments name their runs, and how busy the machine was while they ran: what `harness
overhead` (nsys or torch.profiler) and `run --nsys`'s baseline comparison share."""

from __future__ import annotations

from dataclasses import replace

from harness.core import machine
from harness.core.records import RunResult

DEFAULT_MAX_TIME = 600.0  # s: `harness overhead --ci-target` starts no round that would end later


def label_for(mode: str, profiler: str = "nsys") -> str:
    """The label of a profiled run in an overhead table: `nsys light|full`, or `torch` (the baseline's is
    analysis.compare.overhead.baseline_label's)."""
    return f"nsys {mode}" if profiler == "nsys" else profiler


def run_load(result: RunResult) -> machine.MachineLoad | None:
    data = result.extra.get("machine")
    return machine.MachineLoad.from_dict(data) if data else None


def experiment_load(results: list[RunResult]) -> machine.MachineLoad | None:
    """Load average before the first run and after the last; CPU shares of the runs without nsys."""
    loads = [load for r in results if (load := run_load(r)) is not None]
    overall = machine.combine([x for x in loads if x.others_share is not None])
    if overall is None or not loads:
        return overall
    return replace(overall, load_before=loads[0].load_before, load_after=loads[-1].load_after)
