"""`harness advise RUN` and `harness health RUN`: a stored run's health (its capture's checks and the run's
own: profiler overhead, NVTX vs timers, missing ranks, a busy machine) and its findings.

The run's own figures come from the results database: the overhead against its baseline run (all the runs of
its `harness overhead` experiment when it has one: their confidence interval), the stored agreement table,
the ranks that stored steps, the machine load of the run and its baseline. The capture's checks and the
findings come from its export or trace when it is still there, else from what `run` stored with the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analysis.front.examine import Baseline, Measured, judge_stored, run_facts
from harness.core.machine import busy_of
from harness.core.records import phases_for
from harness.experiments.opening import open_report
from harness.profilers.overhead_steps import label_for
from harness.store.blocks import trace_of

if TYPE_CHECKING:
    import pandas as pd

    from analysis.advice.checks import Health
    from analysis.advice.findings import Thresholds
    from analysis.advice.run_checks import ExportFacts, RunFacts
    from harness.store.results import ResultsStore
    from harness.store.schema import Run


@dataclass
class RunAdvice:
    run_id: str
    record: dict[str, Any]  # analysis.advice.record: health and findings
    health: Health
    notes: list[str] = field(default_factory=list)


def _label(run: Run) -> str:
    return label_for(run.nsys_mode, run.profiler) if run.profiler == "nsys" else run.profiler


def _overhead_runs(store: ResultsStore, run: Run) -> tuple[list[str], list[str]]:
    """Baseline and profiled run ids behind the run's overhead figure: its `harness overhead` experiment's
    runs (same profiler and mode), else the run and its own baseline."""
    if run.experiment and run.experiment.startswith("overhead-"):
        runs = store.runs(experiment=run.experiment)
        base = runs[runs["profiler"] == "none"]["run_id"].tolist()
        same = runs[
            (runs["profiler"] == run.profiler) & (runs["nsys_mode"].fillna("") == (run.nsys_mode or ""))
        ]
        if base and len(same):
            return base, same["run_id"].tolist()
    return ([run.baseline_run_id], [run.id]) if run.baseline_run_id else ([], [])


def measured_of(store: ResultsStore, run: Run) -> Measured:
    """The run's own figures as the results database holds them: its timers, those of the runs behind its
    overhead figure, why the machine was busy while it and its baseline ran, the device."""
    steps = store.step_timings([run.id])
    against = None
    if run.profiler != "none":
        base, profiled = _overhead_runs(store, run)
        if base:
            timers = store.step_timings([*base, *profiled])
            runs = {rid: part for rid, part in timers.groupby("run_id", sort=False)}
            empty = timers.iloc[:0]
            against = Baseline(
                [runs.get(rid, empty) for rid in base],
                f"baseline run {base[0]}" if len(base) == 1 else f"{len(base)} baseline runs",
                _label(run),
                profiled=[runs.get(rid, empty) for rid in profiled],
            )
    loads = [
        (r.summary or {}).get("machine")
        for r in [run, *store.linked(run.id)]
        if r.id == run.id or r.id == run.baseline_run_id
    ]
    loads = [data for data in loads if data]
    # a profiled run right after its baseline: its load average before is ours (judged for the baseline)
    return Measured(
        timers=steps,
        phases=phases_for(run.mode, run.world_size or 1),
        world_size=run.world_size or 1,
        device=run.device,
        busy=busy_of([(data, i > 0 or not run.baseline_run_id) for i, data in enumerate(loads)]),
        baseline=against,
    )


def stored_facts(store: ResultsStore, run: Run, export: ExportFacts | None = None) -> RunFacts:
    """The run's own figures, from the results database (and what its export holds, when it was read)."""
    return run_facts(measured_of(store, run), _agreement_frame(run), export)


def _agreement_frame(run: Run) -> pd.DataFrame | None:
    import pandas as pd

    if not run.agreement:
        return None
    return pd.DataFrame(
        [(a.phase, a.steps, a.rel_diff) for a in run.agreement], columns=["phase", "steps", "rel_diff"]
    )


def run_advice(
    store: ResultsStore, ref: str, *, thresholds: Thresholds | None = None, cache: bool = True
) -> RunAdvice:
    """The run `ref` names (an id, a prefix, `latest`, -N): its health and findings."""
    run = store.get(ref)
    export = trace_of(run)
    measured, agreement = measured_of(store, run), _agreement_frame(run)
    stored = dict(run.advice) if run.advice else None
    if export is None:
        judged = judge_stored(None, measured, agreement, run=run.id, stored=stored, thresholds=thresholds)
    else:
        with open_report(export, cache=cache) as trace:
            judged = judge_stored(
                trace, measured, agreement, run=run.id, stored=stored, thresholds=thresholds
            )
    return RunAdvice(run.id, judged.record, judged.health, judged.notes)
