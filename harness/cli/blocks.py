"""`harness blocks RUN`: per-block time of an --nvtx-detail run (attention against MLP, and their parts)."""

from __future__ import annotations

from typing import Annotated

import typer

from harness.cli.common import DbOpt, FormatOpt, RunRefCommand, WideOpt, cli_errors, run_reference, warn
from harness.cli.terminal.output import Format, emit
from harness.experiments import run_tables
from harness.store import results as results_db


@cli_errors
def blocks_cmd(
    run: Annotated[
        str,
        typer.Argument(
            help="A run id (or a unique prefix), -1, -2, … from the newest, or `latest`: the newest "
            "--nvtx-detail run.",
            callback=run_reference,
        ),
    ] = "latest",
    by_layer: Annotated[bool, typer.Option("--by-layer", help="One row per block and layer.")] = False,
    db: DbOpt = None,
    fmt: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Mean time per step of every block (layer, attention, mlp and their parts; embedding, norm, lm_head),
    its share of the step and how often it ran; `outside blocks` is the rest of each phase.

    The source is what the run has: its synchronised timers (no profiler), the torch.profiler trace, or the
    nsys export (GPU time per range on a GPU); the title names it.
    """

    store = results_db.ResultsStore(db, readonly=True)
    report = run_tables.block_report(store, run, by_layer=by_layer)
    if report.warning:  # first: the table is read knowing it
        warn(report.warning)
    table = report.table
    if fmt is not Format.table:
        table = table.assign(source=report.source)
    emit(table, fmt, title=report.title, notes=report.notes, wide=wide)


def register(app: typer.Typer) -> None:
    app.command(
        "blocks",
        cls=RunRefCommand,
    )(blocks_cmd)
