"""Tables over several exports (or one capture's processes): each read by a worker, then combined. Opening
one export or report is harness.experiments.opening's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.ranks.capture_ranks import analyse_by_process, one_capture
from analysis.ranks.ranks import ranks_report
from analysis.tables.tables import combine, run_task
from analysis.trace.multi import check_name_ranks, label_sources
from analysis.trace.multi_run import raise_errors, run_tasks
from harness.experiments.opening import sqlite_for

if TYPE_CHECKING:
    from analysis.ranks.ranks import RanksReport
    from analysis.tables.multi_tables import Combined


def analyse_many(
    kind: str,
    inputs: list[Path],
    options: dict[str, Any],
    *,
    by_rank: bool = False,
    jobs: int | None = None,
    dask: str | None = None,
    cache: bool = True,
) -> Combined:
    """One command's tables over several exports (analysis.trace.multi): reports are exported first, here, and
    the ranks come from the names the user gave."""

    if by_rank and len(inputs) == 1:
        return analyse_by_process(kind, sqlite_for(inputs[0], cache=cache), options, cache=cache)
    check_name_ranks(inputs)
    exports = [sqlite_for(p, cache=cache) for p in inputs]
    parts = run_tasks(run_task, exports, kind, options, cache, jobs=jobs, dask=dask)
    for given, part in zip(inputs, parts, strict=True):
        part.path = str(given)
    raise_errors(parts)
    sources = label_sources(inputs, parts)
    return combine(kind, parts, sources, by_rank=by_rank, options=options)


def ranks_of(
    inputs: list[Path], *, jobs: int | None = None, dask: str | None = None, cache: bool = True
) -> RanksReport:
    """`harness ranks` over exports or reports (reports exported first)."""
    check_name_ranks(inputs)
    exports = [sqlite_for(p, cache=cache) for p in inputs]
    report = one_capture(exports, cache=cache)
    if report is None:
        report = ranks_report(exports, names=inputs, jobs=jobs, dask=dask, cache=cache)
    return report
