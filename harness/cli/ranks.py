"""`harness ranks`: per-rank phase times, GPU busy time, communication kernels and the straggler, from one
export per rank (analysis.ranks.ranks). `--html` draws the straggler (compute and wait per rank), the ranks ×
phases heatmap and the aligned timeline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.cli.common import (
    DbOpt,
    RunRefCommand,
    cli_errors,
    file_option,
    note,
    refuse_inputs,
    refuse_page_on_stdout,
    warn,
    writing,
)
from harness.cli.reading import AS_GIVEN, Reading, reading_options
from harness.cli.terminal.output import emit_many
from harness.core.errors import HarnessError
from harness.core.records import names_a_file
from harness.experiments import ranks as run_ranks
from harness.store import results as results_db
from workloads.names import counted

# hidden argument: Typer would print its type as <list[Path]>; the epilog describes it
EXPORTS_HELP = (
    "EXPORT: one export (or report, or Kineto trace) per rank, a glob pattern or a folder; ranks from "
    "rank<R> in the file names, else the traces, else the order given. Or a run id (or `latest`) of "
    "`harness run --nproc`: its per-rank exports, else its per-rank timers."
)


def _is_run_id(arg: Path) -> bool:
    """A run id or `latest`, not a path: nothing there, no folder, no glob, no export suffix (a mistyped
    file name is then said missing as a file, not as a run)."""
    text = str(arg)
    return not names_a_file(text) and not any(c in text for c in "*?[")


@cli_errors
@reading_options(omit=("by_rank",), after={"no_cache": ("db",)})
def ranks_cmd(
    exports: Annotated[
        list[Path], typer.Argument(show_default=False, metavar="EXPORT", hidden=True, readable=False)
    ],
    html: Annotated[
        Path | None,
        file_option(
            "--html",
            help="Also write a page: the straggler (compute and wait per rank), the ranks × phases heatmap "
            "and the timeline.",
        ),
    ] = None,
    reading: Reading = AS_GIVEN,
    db: DbOpt = None,
) -> None:
    """Per rank: phase times and GPU busy time, NCCL kernels; per phase: the imbalance and the straggler.

    Imbalance and the straggler need two or more ranks; one rank gets its own times and a note. In one
    capture of several ranks, each collective's Start counts from the session's start, where Nsight Systems'
    timeline puts 0 and `harness timeline --start/--end` take times (a PyTorch trace: from its first
    event)."""

    read = {"jobs": reading.jobs, "dask": reading.dask, "cache": not reading.no_cache}
    skipped: list[str] = []  # what a folder held that looked like an export and was not taken
    refuse_page_on_stdout(html)
    if len(exports) == 1 and _is_run_id(exports[0]):
        store = results_db.ResultsStore(db, readonly=True)
        run = store.get(str(exports[0]))
        inputs = [store.file, run.nsys_sqlite, run.nsys_rep, *(run.artifacts or {}).values()]
        if html is not None:
            refuse_inputs(html, inputs, "--html")
        report = run_ranks.ranks_of_run(store, run.id, **read)
    else:
        paths = run_ranks.expand(exports, skipped)
        inputs = run_ranks.inputs_of(paths)
        if html is not None:
            refuse_inputs(html, inputs, "--html")
        report = run_ranks.ranks_of(paths, **read)
    report.notes = [*skipped, *report.notes]
    over = counted(len(report.labels), "rank")
    title = f"Imbalance per phase over {over} (mean per step)"
    tables = [(title, report.imbalance)] if len(report.imbalance) else []  # one rank: a note says why not
    if len(report.stragglers):
        tables.append(
            ("Straggler: compute and wait in collectives per rank (mean per step)", report.stragglers)
        )
    tables.append(("Phase time per rank", report.phase_times))
    if len(report.gpu):  # from exports; the timers' per-rank means are the table above
        tables.append(("GPU and communication per rank", report.per_rank))
    if report.around is not None:  # one capture of several ranks (analysis.ranks.capture_ranks)
        tables.append(
            ("Around the collectives, per rank: compute before, wait for the last rank", report.around)
        )
        tables.append(("Each collective on each rank", report.collectives))
    for warning in report.warnings:
        warn(warning)
    emit_many(tables, reading.format, notes=report.notes, wide=reading.wide, limit=reading.limit)
    if html is not None:
        if "start_ns" not in report.phases:
            raise HarnessError(
                "--html draws the ranks from their exports, and this run has none: run it with --nsys"
            )

        with writing(html, "--html"):
            page = run_ranks.write_page(report, html)
        drawn = len(page.drawn)
        note(f"wrote {html} ({page.size_bytes / 1e6:.1f} MB): {drawn} panel{'' if drawn == 1 else 's'}")


def register(app: typer.Typer) -> None:
    app.command(
        "ranks",
        cls=RunRefCommand,
        epilog=EXPORTS_HELP,
    )(ranks_cmd)
