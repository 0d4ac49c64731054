"""`harness dashboard`: one self-contained HTML page of plotly panels from the results store or an export."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from harness.cli.common import (
    DbOpt,
    FormatOpt,
    LastOpt,
    ModelOpt,
    OldOutputOpt,
    WideOpt,
    cli_errors,
    comma_list,
    file_option,
    is_stdout,
    is_stream,
    note,
    refuse_inputs,
    shown,
    warn,
)
from harness.cli.reading import EndOpt, NoCacheOpt, StartOpt
from harness.cli.terminal.output import Format, console_for, emit, print_lines
from harness.core.errors import UsageError
from harness.experiments import pages
from harness.store import results as results_db
from harness.store.location import resolve_url, sqlite_file
from workloads.names import counted


@cli_errors
def dashboard_cmd(
    report: Annotated[
        Path | None,
        typer.Argument(
            help="An nsys export (.sqlite) or report (.nsys-rep, .qdrep): its profile panels.", readable=False
        ),
    ] = None,
    runs: Annotated[
        str | None,
        typer.Option("--runs", metavar="<ids>", help="Comma-separated run ids (unique prefixes work)."),
    ] = None,
    last: LastOpt = None,
    model: ModelOpt = None,
    compare: Annotated[
        str | None,
        typer.Option("--compare", metavar="<a,b>", help="Two run ids A,B for the run comparison panel."),
    ] = None,
    sweep: Annotated[
        str | None,
        typer.Option(
            "--sweep",
            metavar="<id>",
            help="The attention sweep to draw (id or unique prefix); the newest if none.",
        ),
    ] = None,
    out: Annotated[
        Path,
        file_option("--out", "-o", help="The HTML file to write (- for standard output)."),
    ] = Path("dashboard.html"),
    output: OldOutputOpt = None,
    start: StartOpt = None,
    end: EndOpt = None,
    open_page: Annotated[bool, typer.Option("--open", help="Open the page in a web browser.")] = False,
    no_cache: NoCacheOpt = False,
    db: DbOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Write plotly dashboards (phase times, step noise, overhead, kernels, NVTX, timeline, throughput).

    Of an export, its timeline shows the window --start/--end gives (--start alone: a second from there),
    else one harness step, or the busiest second where the export has no `step` ranges."""

    if report is not None and (runs or last or model or compare):
        raise UsageError(
            "give either an export (REPORT.sqlite) or run filters (--runs/--last/--model), not both"
        )
    if report is not None and sweep is not None:
        raise UsageError("--sweep picks a stored attention sweep; an export's page has no attention panel")
    if sweep is not None and not sweep.strip():
        raise UsageError(f"--sweep names no sweep ({sweep!r}): give an attention sweep's id")
    if (start is not None or end is not None) and report is None:
        raise UsageError(
            "--start/--end pick a window of an export's timeline: give the export (REPORT.sqlite)"
        )
    asked = comma_list("--runs", runs)
    if runs is not None and not asked:  # an empty list is not "every run"
        raise UsageError(f"--runs names no run ({runs!r}): give run ids separated by commas")
    if runs and last:
        raise UsageError("give --runs or --last, not both")
    out = output if output is not None else out
    if open_page and is_stream(out):
        raise UsageError(f"--open opens a page file in a browser; {shown(out)} is not one: give a file name")
    pair = comma_list("--compare", compare)
    if compare is not None and len(pair) != 2:
        raise UsageError(f"--compare takes two run ids separated by a comma, got {compare!r}")

    unmatched = None
    if report is not None:
        window = (start, end) if start is not None or end is not None else None
        refuse_inputs(out, [sqlite_file(resolve_url(db))], pages.OUT)  # not read here: never replaced either
        page = pages.export_dashboard(report, out, cache=not no_cache, window=window)
    else:
        store = results_db.ResultsStore(db, readonly=True)
        ids = [store.get(r).id for r in asked] or None
        pair_ids = (store.get(pair[0]).id, store.get(pair[1]).id) if pair else None
        if pair_ids and pair_ids[0] == pair_ids[1]:
            raise UsageError(f"--compare names run {pair_ids[0]} twice: give two different runs")
        given = " ".join(f"--{k} {v}" for k, v in (("runs", runs), ("last", last), ("model", model)) if v)
        page, held, unmatched = pages.runs_dashboard(
            store, out, ids=ids, last=last, model=model, compare=pair_ids, asked=given, sweep=sweep
        )
        if unmatched:
            warn(f"{unmatched}: the page says what is missing")
        elif not held and not store.left_out:  # one left out is said as such
            warn("the results database holds no runs: the page says what is missing")
    for line in page.notes:
        note(line)
    for line in page.warnings:
        warn(line)
    for panel in page.panels:
        if panel.failed:
            warn(f"panel {panel.key!r} failed: {panel.missing}")
    summary = pages.panel_table(page.panels)
    title = (
        f"wrote {shown(out)} ({page.size_bytes / 1e6:.1f} MB): "
        f"{counted(len(page.drawn), 'panel')} drawn, {len(page.lacking)} missing"
    )
    file = sys.stderr if is_stdout(out) else None  # the page is on standard output
    if unmatched and format is Format.table:
        # every panel lacks the runs the filters matched none of, as the warning said: no table of that
        print_lines(console_for(file), title, style="italic", keep="")
    else:
        emit(summary, format, title=title, wide=wide, file=file)
    if open_page:
        import webbrowser

        webbrowser.open(out.resolve().as_uri())


def register(app: typer.Typer) -> None:
    app.command("dashboard")(dashboard_cmd)
