"""`harness advise` and `harness health`, of an export or of a stored run (analysis.advice, through
analysis.front.examine for a run): a capture's health, findings and nsys's expert-system rules; a stored
run's health (its capture's checks and the run's own: profiler overhead, NVTX vs timers, missing ranks, a busy
machine) and its findings; and the stored advice of a run in lines and tables, as `run` and `show` print it.

The run's own figures come from the results database: the overhead against its baseline run (all the runs of
its `harness overhead` experiment when it has one: their confidence interval), the stored agreement table,
the ranks that stored steps, the machine load of the run and its baseline. The capture's checks and the
findings come from its export or trace when it is still there, else from what `run` stored with the run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from analysis.advice import nsys_rules
from analysis.advice.base import Stop
from analysis.advice.checks import FAIL, capture_failures
from analysis.advice.checks import failed_said as failed_said  # how `advise` names the checks failed
from analysis.advice.findings import DATA_COLUMN as DATA_COLUMN
from analysis.advice.findings import ON_OPERATORS, RunRecord, Thresholds, advice, findings_table
from analysis.advice.health import NOT_KNOWN, capture_health
from analysis.advice.record import (
    GONE,
    degraded_reason,
    findings_frame,
    health_counts,
    health_line,
    health_table,
    since_judged,
    untrusted_line,
)
from analysis.advice.record import findings_lines as finding_lines
from analysis.front.examine import (
    CAPTURE,
    NOTHING,
    STORED,
    Baseline,
    Measured,
    compared,
    judge_stored,
    run_facts,
)
from analysis.trace.exports import open_source
from analysis.trace.opening import require_events
from harness.core import signals
from harness.core.errors import UsageError
from harness.core.machine import BASELINE_RUN, busy_of
from harness.core.records import PROGRAM_MODE, program_signal, stored_phases
from harness.execution.nsys import CAPTURE_RANGE, export_report
from harness.experiments.roofline import optimizer_roof
from harness.experiments.run_tables import agreement_frame
from harness.profilers.base import label_for
from harness.store.blocks import trace_of
from workloads.plants.catalogue import unseen

if TYPE_CHECKING:
    from pathlib import Path

    import pandas as pd

    from analysis.advice.checks import Check, Health
    from analysis.advice.findings import Advice
    from analysis.advice.run_checks import ExportFacts, RunFacts
    from analysis.trace.trace import Trace
    from harness.store.results import ResultsStore
    from harness.store.schema import Run


WARN, NOTE = "warn", "note"  # how a line of advice is said


@dataclass
class RunAdvice:
    run_id: str
    record: dict[str, Any]  # analysis.advice.record: health and findings
    health: Health
    notes: list[str] = field(default_factory=list)
    judged: str = (
        CAPTURE  # the findings: of its capture read now (CAPTURE), as stored (STORED), none (NOTHING)
    )

    @property
    def stored(self) -> bool:
        """The findings are those stored with the run (its export is gone): judged with the defaults."""
        return self.judged == STORED

    @property
    def no_capture(self) -> bool:
        """The run has no capture and no findings stored: no rule was run."""
        return self.judged == NOTHING


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
    # a profiled run right after its baseline: its load average before is ours (judged for the baseline)
    loads = [
        ((r.summary or {})["machine"], r.id != run.id or not run.baseline_run_id,
         "" if r.id == run.id else BASELINE_RUN)
        for r in [*store.linked(run.id), run]  # the baseline first, as it ran
        if (r.id == run.id or r.id == run.baseline_run_id) and (r.summary or {}).get("machine")
    ]  # fmt: skip
    return Measured(
        timers=steps,
        phases=stored_phases(run),
        world_size=run.world_size or 1,
        device=None if run.mode == PROGRAM_MODE else run.device,  # a program chose its own device
        busy=busy_of(loads),
        baseline=against,
        record=run_record(store, run, steps),
        signal=program_signal(run.summary or {}),  # a program's (`profile -- CMD`)
        stop=_stop(run, steps),
        # the capture range nsys was given, kept with runs under nsys (a run stored without it: not known)
        capture_range=(run.summary or {}).get(CAPTURE_RANGE, NOT_KNOWN),
    )


def _stop(run: Run, timers: pd.DataFrame) -> Stop | None:
    """An interrupted run: the signal that stopped it and the measured steps its first rank finished of
    those it was to run (its capture's missing steps never ran)."""
    if run.status != "interrupted":
        return None
    return Stop.of(signals.stopped_by(run.error), timers, int(run.steps), int(run.warmup))


def run_record(store: ResultsStore, run: Run, timers: pd.DataFrame) -> RunRecord:
    """What the stored run recorded that the findings read: its steps, torch.compile's counters, its
    forward time, its optimizer against its memory roof (its roofline, on a GPU with datasheet roofs)."""
    roof = optimizer_roof(store, run.id) if run.mode == "train" and run.device == "cuda" else None
    return RunRecord.of(timers, (run.summary or {}).get("dynamo"), roof)


def stored_facts(store: ResultsStore, run: Run, export: ExportFacts | None = None) -> RunFacts:
    """The run's own figures, from the results database (and what its export holds, when it was read)."""
    measured = measured_of(store, run)
    return run_facts(measured, _agreement_frame(run), export, compared(measured)[1])


def _agreement_frame(run: Run) -> pd.DataFrame | None:
    return agreement_frame(run.agreement) if run.agreement else None


def run_advice(
    store: ResultsStore, ref: str, *, thresholds: Thresholds | None = None, cache: bool = True
) -> RunAdvice:
    """The run `ref` names (an id, a prefix, `latest`, -N): its health and findings."""
    run = store.get(ref)
    export = trace_of(run)
    stored = dict(run.advice) if run.advice else None
    if export is None and thresholds is not None and thresholds != Thresholds():
        raise UsageError(_no_threshold(run.id, stored))
    measured, agreement = measured_of(store, run), _agreement_frame(run)
    if export is None:
        judged = judge_stored(None, measured, agreement, run=run.id, stored=stored, thresholds=thresholds)
    else:
        with open_source(export, export_report, cache=cache) as trace:
            judged = judge_stored(
                trace, measured, agreement, run=run.id, stored=stored, thresholds=thresholds
            )
    config = run.config or {}
    if judged.judged != NOTHING:  # a planted cause no finding names, and no fix of its own applied: why
        rules = {str(f.get("rule")) for f in judged.record.get("findings") or []}
        fixes = config.get("fixes") or ()
        if why := unseen(config.get("plant"), str(run.device), rules, f"run {run.id}'s capture", fixes):
            judged.notes.append(why)
    return RunAdvice(run.id, judged.record, judged.health, judged.notes, judged.judged)


def advice_of(store: ResultsStore, run: Run) -> dict[str, Any] | None:
    """The health and findings stored with `run`; of a run stored without them whose capture is there (one
    under torch.profiler: its trace is judged when read), those of its capture judged now, as `advise RUN`
    judges it; None with neither."""
    if run.advice is not None or trace_of(run) is None:
        return run.advice
    return run_advice(store, run.id).record


def rules_export(store: ResultsStore, ref: str) -> Path:
    """The nsys export the run `ref` names was captured into, for nsys's rules (`--rule`) to read: its SQLite
    export, else its report (exported again); UsageError where it has neither, or they are gone."""
    from pathlib import Path

    run = store.get(ref)
    stored = [name for name in (run.nsys_sqlite, run.nsys_rep) if name]
    if not stored:
        raise UsageError(
            f"--rule reads an nsys export: run {run.id} has none (it was not captured with nsys); "
            f"its findings: `harness advise {run.id}`"
        )
    for name in stored:
        if Path(name).is_file():
            return Path(name)
    raise UsageError(
        f"--rule reads run {run.id}'s nsys export, which is gone: {' and '.join(stored)} not found"
    )


def _no_threshold(run: str, stored: dict[str, Any] | None) -> str:
    """Why --threshold cannot judge a run whose capture is not there to read again."""
    if not stored:
        return (
            f"--threshold judges run {run}'s capture, but it has none (no export or trace): no rule can run"
        )
    gone = f" ({stored['source']})" if stored.get("source") else ""
    return (
        f"--threshold judges run {run}'s capture again, but its export is gone{gone}: its findings are those "
        f"stored with it, judged with the default thresholds (`harness advise {run}` shows them)"
    )


def thresholds_of(options: list[str]) -> Thresholds:
    """The findings' thresholds with `NAME=VALUE` options applied (an error naming what is wrong)."""
    return Thresholds().with_options(options)


def check_rules(specs: list[str]) -> None:
    """A misspelt rule or option of nsys's rules is an error before anything is read."""
    for spec in specs:
        nsys_rules.parse_rule(spec)


def open_export(report: Path, *, cache: bool = True) -> Trace:
    """The export (or report, exported first) `advise` and `health` read."""
    return open_source(report, export_report, cache=cache)


def judgeable(trace: Trace) -> None:
    """Refuse, in one line saying what the file is, a file that holds no event (a memory timeline): its
    findings would be one failed health check and no ranking. `harness health` shows that check instead."""
    require_events(trace)


def export_health(trace: Trace) -> Health:
    """The capture's health: every check of its export."""
    return capture_health(trace)


def export_advice(trace: Trace, thresholds: Thresholds) -> Advice:
    """The capture's findings (largest time at stake first), the harness's own instruments in it, and what
    the capture alone cannot judge."""
    return advice(trace, thresholds)


def findings_of(found: Advice) -> pd.DataFrame:
    """The findings as a table (`Data`: each one's evidence as data)."""
    return findings_table(found.findings)


@dataclass
class Apart:
    """What `advise` says once, apart from the findings: the harness's own instruments in the capture (as
    data, and its line), and what the capture alone could not judge."""

    instruments: dict[str, Any] | None
    not_judged: list[str] = field(default_factory=list)

    @property
    def instruments_line(self) -> str | None:
        return (self.instruments or {}).get("line")


def said_apart(found: Advice | dict[str, Any]) -> Apart:
    """What is said apart, of a capture's advice or of a record stored with a run."""
    if isinstance(found, dict):
        return Apart(found.get("instruments"), list(found.get("not judged") or []))
    line = found.instruments_line()
    return Apart({**found.instruments.data(), "line": line} if line else None, list(found.not_judged))


def advice_document(table: pd.DataFrame, apart: Apart) -> dict[str, Any]:
    """`advise --format json`: the findings (each with its evidence as data), the harness's instruments,
    what could not be judged."""
    rows = json.loads(table.to_json(orient="records", double_precision=15))
    return {"findings": rows, "instruments": apart.instruments, "not judged": apart.not_judged}


def rule_tables(trace: Trace, specs: list[str]) -> tuple[list[tuple[str, pd.DataFrame]], dict[str, str]]:
    """(spec, the table `nsys analyze -r SPEC` prints) per rule, and why each skipped one was skipped."""
    tables, skipped = [], {}
    for spec in specs:
        try:
            tables.append((spec, nsys_rules.run_rule(trace, spec)))
        except nsys_rules.Skipped as e:
            skipped[spec] = str(e)
    return tables, skipped


def stored_findings(record: dict[str, Any]) -> pd.DataFrame:
    """The findings of an advice record as a table."""
    return findings_frame(record)


def advice_tables(record: dict[str, Any]) -> list[tuple[str, pd.DataFrame]]:
    """A run's health and findings whole, for csv and json."""
    return [("health", health_table(record)), ("findings", findings_frame(record))]


def health_lines(record: dict[str, Any], degraded: str | None = None) -> list[tuple[str, str]]:
    """(WARN or NOTE, line): the health in one line, a warning when not ok; for the run `degraded` names
    (stored as degraded), why first, then the counts and where to see every check."""
    reason = degraded_reason(record)
    if degraded and reason:
        return [
            (WARN, f"run {degraded} stored as degraded: {reason}"),
            (WARN, f"{health_counts(record)}: `harness health {degraded}` shows each"),
        ]
    line = health_line(record)
    return [(NOTE if line.startswith("health ok") else WARN, line)]


def since_capture_line(record: dict[str, Any], run: str) -> str | None:
    """What `show RUN` says where the export the stored health and findings were judged of is gone, or is
    no longer that file (analysis.advice.record.since_judged: its size and times, its sampled digest; the
    export is not read again); None where it is the same, or no stamp of it was kept."""
    now = since_judged(record)
    if now is None:
        return None
    source = record["source"]
    if now == GONE:
        return (
            f"run {run}'s export is gone ({source}): its health and findings shown are those judged of it "
            "when the run was captured"
        )
    return (
        f"run {run}'s export is not the file its health and findings were judged of ({source} has changed "
        f"since the run was captured): those shown are as judged then; `harness health {run}` judges the "
        "export as it is now"
    )


def findings_lines(record: dict[str, Any], run: str = "RUN") -> list[tuple[str, str]]:
    """(WARN or NOTE, line): the top findings, one line each, or why they are not ranked (a warning)."""
    untrusted = untrusted_line(record, run)
    return [(WARN if line == untrusted else NOTE, line) for line in finding_lines(record, run=run)]


def untrusted_checks(checks: list[Check]) -> list[Check]:
    """The failed checks that make what a capture says untrustworthy."""
    return capture_failures(checks)


def failed(health: Health) -> bool:
    """Whether any check failed (`health --strict` exits 1)."""
    return health.worst == FAIL


def unseen_by_nsys(found: list[dict[str, Any]], profiler: str | None, device: str) -> list[str]:
    """The rules of `found`, judged on a CPU run's torch.profiler operators, that `harness optimize MODEL`
    (whose capture is nsys's, with no CUDA on the CPU) would not find, and so not try."""
    if profiler != "torch" or device != "cpu":
        return []
    return sorted({str(f.get("rule")) for f in found} & set(ON_OPERATORS))
