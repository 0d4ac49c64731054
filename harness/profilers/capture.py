"""The step after a capture under nsys that `run --nsys`, `profile -- CMD` and `overhead` share: what the
export shows of the capture itself (its health and findings, analysis.advice), the run made `degraded` when
its capture fails them, the report's paths as stored, and the one save of the run, after the export is read,
with all of it, in one transaction (also when the reading is cut short)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.advice.coverage import export_facts
from analysis.advice.findings import findings
from analysis.advice.health import capture_health
from analysis.advice.record import advice_record, degraded_reason
from analysis.advice.run_checks import RunFacts, run_checks
from analysis.errors import AnalysisError
from analysis.trace.opening import open_trace
from harness.core.errors import HarnessError
from harness.core.records import RunResult
from harness.store.results import UnsavedRun

if TYPE_CHECKING:
    from analysis.trace.trace import Trace
    from harness.execution.nsys import ProfileResult
    from harness.store.results import ResultsStore


def nsys_artifacts(rep: Path | None, sqlite: Path | None) -> dict[str, str]:
    """nsys's files as stored in a run's `artifacts`."""
    return {kind: str(path) for kind, path in (("nsys_rep", rep), ("nsys_sqlite", sqlite)) if path}


def report_paths(prof: ProfileResult) -> dict[str, Any]:
    """What a run under nsys stores: the old nsys_* columns, and the same paths as `artifacts`."""
    return {
        "nsys_rep": str(prof.rep) if prof.rep else None,
        "nsys_sqlite": str(prof.sqlite) if prof.sqlite else None,
        "artifacts": {**nsys_artifacts(prof.rep, prof.sqlite), **prof.artifacts},
    }


def capture_advice(trace: Trace, facts: RunFacts | None = None) -> dict[str, Any]:
    """The capture's health (its export's checks, and the run's own where `facts` says what the run timed)
    and its findings, as stored with the run."""
    health = capture_health(trace)
    if facts is not None:
        facts.export = export_facts(trace)
        health.checks += run_checks(facts)
    return advice_record(health, findings(trace))


def judge(result: RunResult, advice: dict[str, Any], found: dict[str, Any]) -> str | None:
    """`advice` to be stored with the run (into `found`); a run that ended ok but whose capture fails the
    checks becomes `degraded`: the reason, else None."""
    found["advice"] = advice
    reason = degraded_reason(advice)
    if reason and result.status == "ok":
        result.status, result.error = "degraded", reason
        return reason
    return None


def judge_export(result: RunResult, sqlite: Path, found: dict[str, Any], notes: list[str]) -> str | None:
    """`judge` on the capture's own checks, the export opened for them alone (a run whose timers nobody
    compares: `overhead`'s profiled runs); a reading that fails is a note, and no advice."""
    try:
        with open_trace(sqlite) as trace:
            advice = capture_advice(trace)
    except (AnalysisError, HarnessError) as e:
        notes.append(f"run {result.run_id}: no health or findings: {e}")
        return None
    return judge(result, advice, found)


def save_once(store: ResultsStore, result: RunResult, unsaved: list[str], **how: Any) -> None:
    """Save; a run the database will not take is in a file by now: said once in `unsaved`, and on."""
    try:
        store.save(result, **how)
    except UnsavedRun as e:
        if str(e) not in unsaved:
            unsaved.append(str(e))


@contextmanager
def stored_after(
    store: ResultsStore, result: RunResult, unsaved: list[str], how: dict[str, Any], keep: bool = True
) -> Iterator[dict[str, Any]]:
    """The run is stored once, after the block has read the export: with `how` and what the block put in
    the dict it is given (advice, agreement, blocks), in one transaction; also when the block is cut short
    (Ctrl-C). `keep` False: not stored (a failed run with nothing to keep)."""
    found: dict[str, Any] = {}
    try:
        yield found
    finally:
        if keep:
            save_once(store, result, unsaved, **how, **found)
