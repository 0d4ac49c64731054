"""`harness ranks` over exports or reports: the reports exported first, with the nsys the harness finds
(harness.experiments.opening). A table over several exports is the front door's (analysis.front.reading)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from analysis.ranks.capture_ranks import one_capture
from analysis.ranks.ranks import ranks_report
from analysis.trace.multi import check_name_ranks
from harness.experiments.opening import sqlite_for

if TYPE_CHECKING:
    from analysis.ranks.ranks import RanksReport


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
