"""A run's block times (--nvtx-detail) as the results database keeps them, and where a stored run's trace is.

A run without a profiler carries its synchronised block timers (harness.execution.block_timers); a run under
a profiler gets its block times from its trace when it is examined (analysis.front.examine); both are stored
with the run. Reading an older run's trace for them is harness.experiments.blocks'.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.errors import HarnessError
from harness.core.records import LATEST
from harness.store import stored_check
from workloads.names import ALL_PHASES

if TYPE_CHECKING:
    import pandas as pd

    from harness.store.results import ResultsStore
    from harness.store.schema import Run


@dataclass
class BlockRecords:
    records: pd.DataFrame  # analysis.views.blocks.RECORD_COLUMNS
    source: str
    steps: int  # measured steps they cover
    trace: Path | None = None  # read from this trace (not stored)


def resolve(store: ResultsStore, ref: str, *, nvtx_detail: bool = True) -> Run:
    """A run by id (or unique prefix), or `latest`: the newest run (made with --nvtx-detail, if asked)."""
    if ref != LATEST:
        return store.get(ref)
    run = store.latest(nvtx_detail=nvtx_detail)
    if run is None:
        what = "run made with --nvtx-detail" if nvtx_detail else "run"
        raise HarnessError(
            f"no {what} in the results database; `harness run tiny --nvtx-detail` makes one", exit_code=2
        )
    return run


def trace_of(run: Run) -> Path | None:
    """The run's trace: the torch profiler's, else nsys's SQLite export (None: none, or no longer there)."""
    artifacts = run.artifacts or {}
    for path in (artifacts.get("trace"), artifacts.get("nsys_sqlite"), run.nsys_sqlite):
        if path and Path(path).is_file():
            return Path(path)
    return None


def stored_blocks(store: ResultsStore, run: Run) -> BlockRecords | None:
    """The run's block records as stored (None: none stored)."""
    stored = store.block_timings([run.id])
    if not len(stored):
        return None
    records = stored.drop(columns=["run_id", "source"])
    steps = int(records["step"].nunique())
    stray = sorted({str(p) for p in records["phase"]} - set(ALL_PHASES))
    why = None
    if stray:
        why = f"block_timings: phase {stray[0]!r}, not one of {', '.join(ALL_PHASES)}"
    elif run.steps is not None and steps > run.steps:
        why = f"block_timings: {steps} steps, more than the run's {run.steps} measured steps"
    if why:
        raise stored_check.refusal(f"results database {store.where}", run.id, why)
    return BlockRecords(records, str(stored["source"].iloc[0]), steps)
