"""How a capture under nsys is stored, for `run --nsys`, `profile -- CMD` and `overhead` alike: the report's
paths as stored, the run made `degraded` when its capture fails its checks (analysis.front.examine says
why), and the one save of the run, after the export is read, with all of it, in one transaction (also when
the reading is cut short)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.records import RunResult
from harness.store.results import UnsavedRun

if TYPE_CHECKING:
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


def mark_degraded(result: RunResult, reason: str | None) -> str | None:
    """A run that ended ok but whose capture fails its checks (`reason`, analysis.front.examine's) is
    stored `degraded`: the reason, else None."""
    if reason and result.status == "ok":
        result.status, result.error = "degraded", reason
        return reason
    return None


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
