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

from analysis.advice.checks import why_untrusted
from analysis.advice.coverage import export_facts
from analysis.advice.findings import Thresholds, findings
from analysis.advice.health import Health, capture_health
from analysis.advice.record import advice_record, checks_of
from analysis.advice.run_checks import RUN_CHECKS, ExportFacts, RunFacts, overhead_of, run_checks
from analysis.compare.overhead import BASELINE, headline
from harness.core.machine import MachineLoad
from harness.core.records import phases_for
from harness.experiments.opening import open_report
from harness.profilers.overhead_steps import label_for, step_key
from harness.store.blocks import trace_of

# the run's own checks that read its export (what it stored is kept when the export is gone)
EXPORT_RUN_CHECKS = ("NVTX vs timers", "device")

if TYPE_CHECKING:
    import pandas as pd

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


def stored_facts(store: ResultsStore, run: Run, export: ExportFacts | None = None) -> RunFacts:
    """The run's own figures, from the results database (and what its export holds, when it was read)."""
    import pandas as pd

    overhead = None
    if run.profiler != "none":
        base, profiled = _overhead_runs(store, run)
        if base:
            label = _label(run)
            steps = store.step_timings([*base, *profiled])
            steps = steps[~steps["warmup"].astype(bool)]
            order = {rid: i for i, rid in enumerate(base)} | {rid: i for i, rid in enumerate(profiled)}
            frame = pd.DataFrame(
                {
                    "label": [BASELINE if r in base else label for r in steps["run_id"]],
                    "repeat": [order[r] for r in steps["run_id"]],
                    "step": [step_key(s, r) for s, r in zip(steps["step"], steps["rank"], strict=True)],
                    "phase": steps["phase"],
                    "duration_ns": steps["duration_ns"],
                }
            )
            found = headline(frame, phases_for(run.mode, run.world_size or 1)).get(label)
            against = f"baseline run {base[0]}" if len(base) == 1 else f"{len(base)} baseline runs"
            overhead = overhead_of(found, label, against, runs=len(profiled))
    agreement = (
        _agreement_frame(run) if run.agreement else None  # phase, steps, rel_diff
    )
    loads = [
        (r.summary or {}).get("machine")
        for r in [run, *store.linked(run.id)]
        if r.id == run.id or r.id == run.baseline_run_id
    ]
    loads = [data for data in loads if data]
    # a profiled run right after its baseline: its load average before is ours (judged for the baseline)
    busy = None
    if loads:
        busy = [
            why
            for i, data in enumerate(loads)
            for why in MachineLoad.from_dict(data).busy_reasons(load_counts=i > 0 or not run.baseline_run_id)
        ]
    first = min((s.rank or 0 for s in run.step_timings), default=0)  # the export is this rank's
    timed: dict[int, list[str]] = {}
    for s in run.step_timings:
        if (s.rank or 0) == first and not s.warmup:
            timed.setdefault(s.step, []).append(s.phase)
    return RunFacts(
        overhead=overhead,
        agreement=agreement,
        world_size=run.world_size or 1,
        ranks_seen=sorted({s.rank or 0 for s in run.step_timings}),
        busy=busy,
        timed=timed,
        export=export,
        device=run.device,
    )


def _agreement_frame(run: Run) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(
        [(a.phase, a.steps, a.rel_diff) for a in run.agreement], columns=["phase", "steps", "rel_diff"]
    )


def run_advice(
    store: ResultsStore, ref: str, *, thresholds: Thresholds | None = None, cache: bool = True
) -> RunAdvice:
    """The run `ref` names (an id, a prefix, `latest`, -N): its health and findings."""
    run = store.get(ref)
    notes: list[str] = []
    export = trace_of(run)
    facts = None
    if export is not None:
        with open_report(export, cache=cache) as trace:
            health = capture_health(trace)
            found = findings(trace, thresholds)
            facts = export_facts(trace) if trace.format == "nsys-sqlite" else None
        record = advice_record(health, found)
    elif run.advice:
        record = dict(run.advice)
        health = Health(record.get("source") or f"run {run.id}")
        health.checks = [c for c in checks_of(record) if c.name not in RUN_CHECKS]
        notes.append(f"run {run.id}'s export is gone: the capture checks and findings stored with the run")
    else:
        record = {"source": None, "health": {}, "findings": []}
        health = Health(f"run {run.id}")
        notes.append(f"run {run.id} has no export or trace: only the run's own checks")
    checks = run_checks(stored_facts(store, run, facts))
    if export is None and run.advice:  # the checks that read the export: as stored when it is gone
        stored = {c.name: c for c in checks_of(run.advice)}
        checks = [stored.get(c.name, c) if c.name in EXPORT_RUN_CHECKS else c for c in checks]
    health.checks += checks
    record["health"] = advice_record(health, [])["health"]
    record["untrusted"] = why_untrusted(health.checks) or None
    return RunAdvice(run.id, record, health, notes)
