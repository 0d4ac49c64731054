"""The tables of a run across ranks for `harness run --nproc` and `harness show`: each rank's mean phase
times; per phase the mean over ranks, slowest and fastest rank; per rank its time computing and waiting in
the all-reduce, and the straggler, the rank that arrives last, with what it costs the others
(analysis.ranks.ranks)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from analysis.advice.verdict import failed_captures
from analysis.dashboard import DashboardData, write_dashboard
from analysis.ranks.capture_ranks import one_capture
from analysis.ranks.ranks import (
    PHASE_COLUMNS,
    RanksReport,
    communication_share,
    imbalance_table,
    one_rank_note,
    per_rank,
    phase_table,
    ranks_report,
    straggler_note,
    straggler_table,
    with_step_rows,
)
from analysis.trace import multi
from analysis.trace.exports import files_read, said_on_error, sqlite_for
from harness.core.errors import UsageError
from harness.core.records import stored_phases
from harness.execution.nsys import export_report
from workloads.names import COMM_PHASES

if TYPE_CHECKING:
    from pathlib import Path

    import pandas as pd

    from analysis.dashboard import Dashboard
    from analysis.ranks.ranks import RanksReport
    from harness.core.records import RunResult
    from harness.store.results import ResultsStore
    from harness.store.schema import Run


IMBALANCE = "across ranks: slowest / median rank per phase (in the all-reduce, the slowest waited longest)"
STRAGGLER = "straggler: the rank that arrives last at the all-reduce (most compute, least wait)"


def frame(rows: Iterable[tuple[int, str, int, int]]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(list(rows), columns=PHASE_COLUMNS)


def result_frame(result: RunResult) -> pd.DataFrame:
    """The measured steps of a RunResult as rank, phase, step, duration_ns."""
    return frame((s.rank, p, s.step, ns) for s in result.steps if not s.warmup for p, ns in s.phases.items())


def run_frame(run: Run) -> pd.DataFrame:
    """The measured steps of a stored run as rank, phase, step, duration_ns (a NULL rank is 0)."""
    return frame((t.rank or 0, t.phase, t.step, t.duration_ns) for t in run.step_timings if not t.warmup)


def rank_tables(df: pd.DataFrame) -> tuple[list[tuple[str, pd.DataFrame]], list[str]]:
    """The three tables, the straggler and the communication share; nothing for fewer than two ranks."""

    if df.empty or df["rank"].nunique() < 2:
        return [], []
    n = df["rank"].nunique()
    imbalance = imbalance_table(with_step_rows(df))
    imbalance.attrs["whole"] = ["Phase"]
    stragglers = straggler_table(df)
    tables = [
        (f"phases per rank ({n} ranks, mean of measured steps)", per_rank(df)),
        (IMBALANCE, imbalance),
        (STRAGGLER, stragglers),
    ]
    share = communication_share(df)
    notes = [straggler_note(stragglers)]
    notes += [f"communication (allreduce): {share * 100:.1f}% of the step"] if share == share else []
    return tables, notes


def inputs_of(paths: list[Path]) -> list[Path]:
    """Every file `ranks_of` may read for `paths` (a report's exports beside it too)."""
    return [f for p in paths for f in files_read(p)]


def ranks_of(
    inputs: list[Path], *, jobs: int | None = None, dask: str | None = None, cache: bool = True
) -> RanksReport:
    """`harness ranks` over exports or reports (reports exported first, once, with the nsys the harness finds:
    analysis.trace.exports). One capture of several ranks is split by process."""
    multi.check_name_ranks(inputs)
    beside: list[str] = []  # the reports read through the export lying beside them
    exports = [sqlite_for(p, export_report, cache=cache, notes=beside) for p in inputs]
    with said_on_error(beside):
        report = one_capture(exports, cache=cache)
        if report is None:
            report = ranks_report(exports, names=inputs, jobs=jobs, dask=dask, cache=cache)
    report.notes = [*beside, *report.notes]
    report.warnings = failed_captures(exports, inputs, cache=cache)  # as every table of an export says
    return report


def ranks_of_run(store: ResultsStore, ref: str, **read: Any) -> RanksReport:
    """`harness ranks RUN` (a run id, a unique prefix, or `latest`): from the run's per-rank nsys exports
    where it has them (GPU busy time, NCCL kernels, the aligned timeline), else from its per-rank timers
    in the results database (phase times and the straggler only)."""
    from pathlib import Path

    run = store.get(ref)
    exports = sorted(
        (Path(path) for kind, path in (run.artifacts or {}).items() if kind.startswith("nsys_sqlite.rank")),
        key=lambda p: p.name,
    )
    if exports and all(p.exists() for p in exports):
        report = ranks_of(exports, **read)
        report.notes.insert(0, f"run {run.id}: its {len(exports)} per-rank exports")
        return report
    df = run_frame(run)
    single = Path(run.nsys_sqlite) if run.nsys_sqlite else None
    if df.empty and single is not None and single.exists():  # `harness profile`: no timers, its ranges
        report = ranks_of([single], **read)
        report.notes.insert(0, f"run {run.id}: its export (the run has no in-process timers)")
        return report
    if df.empty:
        raise UsageError(f"run {run.id} has no measured steps")
    # a run under nsys in one process has its one export: ranks of it give its GPU busy time
    busy = "GPU busy time needs --nsys"
    if single is not None and single.exists():
        busy = f"its GPU busy time: `harness ranks {single}`"
    notes = [f"run {run.id}: in-process timers from the results database ({busy})"]
    if exports:
        notes.append(f"its exports are gone ({', '.join(p.name for p in exports if not p.exists())})")
    stragglers = straggler_table(df)
    notes += one_rank_note(df)
    notes += [straggler_note(stragglers)] if len(stragglers) else []
    share = communication_share(df)
    # only a training step across ranks communicates (its gradients' all-reduce): generate has nothing to say
    if share == share and set(COMM_PHASES) & set(stored_phases(run)):
        notes.append(f"communication (allreduce): {share * 100:.1f}% of the step")
    return RanksReport(
        phases=df,
        gpu=frame([]),
        phase_times=phase_table(with_step_rows(df)),  # one rank: its step's row (the sum of its phases)
        imbalance=imbalance_table(with_step_rows(df)),
        stragglers=stragglers,
        per_rank=per_rank(df),
        labels={int(r): f"rank {r}" for r in sorted(df["rank"].unique())},
        notes=notes,
    )


def expand(exports: list[Path], skipped: list[str]) -> list[Path]:
    """The exports the arguments name: files, a glob's matches, a folder's exports; what a folder held
    that looked like an export and was not taken is said in `skipped`."""
    return multi.expand(exports, skipped)


def write_page(report: RanksReport, out: Path) -> Dashboard:
    """The ranks' page: the straggler (compute and wait per rank), the ranks × phases heatmap and the
    aligned timeline (OSError as raised)."""
    source = f"{len(report.labels)} exports: {', '.join(report.labels.values())}"
    data = DashboardData(ranks=report.phases, source=source)
    return write_dashboard(data, out, scope="ranks", title="harness ranks")
