"""`harness advise` and `harness health`: thin commands over harness.experiments.advice (findings, nsys's
expert-system rules, capture health, of an export or a stored run)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli.common import DbOpt, RunRefCommand, cli_errors, err, note, run_reference, warn
from harness.cli.reading import AS_GIVEN, Reading, reading_options
from harness.cli.terminal.fit import COMFORTABLE, table_width
from harness.cli.terminal.output import Format, console_for, emit, emit_many
from harness.core.errors import UsageError
from harness.core.records import names_a_file
from harness.experiments import advice as run_advice
from harness.store import results as results_db

if TYPE_CHECKING:
    from harness.experiments.advice import Trace

DATA = run_advice.DATA_COLUMN
ReportArg = Annotated[
    str,
    typer.Argument(
        show_default=False,
        metavar="REPORT|RUN",
        help="An nsys export (.sqlite), a report (.nsys-rep, exported first) or a Kineto trace (.json(.gz)); "
        "or a stored run: its id (or a unique prefix), `latest`, or -1, -2, … counted from the newest.",
        callback=run_reference,
    ),
]
# what `advise` and `health` take of the options every analysis command shares: one export, its cache, the
# format
one_export = reading_options(omit=("by_rank", "jobs", "dask", "limit"), after={"no_cache": ("db",)})
IgnoreHealthOpt = Annotated[
    bool,
    typer.Option(
        "--ignore-health",
        help="List the findings even when the capture failed its health checks (they are then marked "
        "untrusted: their time at stake comes from what is left of the capture).",
    ),
]


@contextlib.contextmanager
def _open(report: Path, reading: Reading) -> Iterator[Trace]:
    """The export `advise` and `health` read; what reading it said (which export was read, what the cache
    held that was wrong, what could not be kept) said when it is closed."""
    with run_advice.open_export(report, cache=not reading.no_cache) as trace:
        yield trace
        said = list(trace.notes)
    _say_notes(said)


def _say_notes(notes: list[str]) -> None:
    for line in notes:
        note(line)


@cli_errors
@one_export
def advise_cmd(
    report: ReportArg,
    rule: Annotated[
        list[str] | None,
        typer.Option(
            "--rule",
            "-r",
            metavar="NAME[:opt=val]",
            help="One of nsys analyze's rules, in its syntax: cuda-async-memcpy, cuda-sync-api, "
            "cuda-sync-memcpy, cuda-sync-memset, gpu-low-util[:threshold=50][:chunks=30], "
            "gpu-starv[:gap=500] (as nsys 2022.4 prints them), or 2023.4's names cuda_memcpy_async, "
            "cuda_api_sync[:process=PID][:thread=TID], cuda_memcpy_sync, cuda_memset_sync, gpu_time_util, "
            "gpu_gaps (as 2023.4 prints them); each takes rows=50, start=NS, end=NS, nvtx=TEXT[@DOMAIN]. "
            "Prints what `nsys analyze -r NAME` prints. Repeat for several.",
        ),
    ] = None,
    threshold: Annotated[
        list[str] | None,
        typer.Option(
            "--threshold",
            "-t",
            metavar="NAME=VALUE",
            help="Change when a finding fires (docs/advice.md), e.g. host_wait_share=0.05. "
            "Repeat for several.",
        ),
    ] = None,
    ignore_health: IgnoreHealthOpt = False,
    reading: Reading = AS_GIVEN,
    db: DbOpt = None,
) -> None:
    """Findings ranked by the time at stake (rule, evidence, phase, upper bound of what fixing saves, the
    fix); with --rule, the rows of nsys's expert-system rules. A capture that fails its health checks
    (`harness health`) gets no ranking: exit 1, saying which checks failed."""

    specs = list(rule or [])
    run_advice.check_rules(specs)  # a misspelt rule or option is an error before anything is read
    given = [name for name, on in (("--threshold", threshold), ("--ignore-health", ignore_health)) if on]
    if specs and given:  # nsys's rules neither rank findings nor look at health: these would change nothing
        raise UsageError(
            f"{', '.join(given)}: for the findings; --rule prints nsys's rules, which take their options in "
            "nsys's syntax (gpu-low-util:threshold=50)"
        )
    thresholds = run_advice.thresholds_of(list(threshold or []))
    if not names_a_file(report) and specs:  # nsys's rules read the export the run was captured into
        report = str(run_advice.rules_export(results_db.ResultsStore(db, readonly=True), report))
    elif not names_a_file(report):
        advice = run_advice.run_advice(
            results_db.ResultsStore(db, readonly=True),
            report,
            thresholds=thresholds,
            cache=not reading.no_cache,
        )
        _say_notes(advice.notes)
        if advice.no_capture:  # "no rule fired" would read as a clean run: no rule was run
            err(
                f"no findings for run {advice.run_id}: it has no capture to judge, so no rule was run; "
                "advice needs a run under --nsys or --profiler torch whose export or trace is still there"
            )
            raise typer.Exit(1)
        _refuse_untrusted(f"run {advice.run_id}", advice.run_id, advice.health.checks, ignore_health)
        table = run_advice.stored_findings(advice.record)
        apart = run_advice.said_apart(advice.record)
        _show_findings(
            table, f"run {advice.run_id}", thresholds, reading, advice.health.checks, apart, advice.stored
        )
        return
    with _open(Path(report), reading) as trace:
        run_advice.judgeable(trace)
        if not specs:
            checks = run_advice.export_health(trace).checks
            _refuse_untrusted(trace.path.name, report, checks, ignore_health)
            found = run_advice.export_advice(trace, thresholds)
            table, apart = run_advice.findings_of(found), run_advice.said_apart(found)
            _show_findings(table, trace.path.name, thresholds, reading, checks, apart)
            return
        tables, skipped = run_advice.rule_tables(trace, specs)
    for why in skipped.values():
        note(why)
    if len(specs) == 1 and tables:
        spec, df = tables[0]
        if df.empty:  # nsys prints nothing for a rule that found nothing
            note(f"{spec}: no rows: nothing found")
            if reading.format is Format.json:
                emit(df, reading.format)
            return
        title = f"{df.attrs.get('title', spec)} ({Path(report).name})"
        emit(df, reading.format, title=title, wide=reading.wide)
    elif len(specs) > 1 or reading.format is Format.json:  # json: a document, saying what was skipped
        emit_many(tables, reading.format, skipped=skipped, wide=reading.wide)


def _refuse_untrusted(what: str, ref: str, checks, ignore_health: bool) -> None:
    """Exit 1 saying why, when the capture failed its health checks (unless --ignore-health); `ref`: what
    the user named (a run or a path), for the command that says more."""
    failed = run_advice.untrusted_checks(checks)
    if not failed or ignore_health:
        return
    for check in failed:
        err(f"{check.name} (fail): {check.evidence}")
    err(
        f"no findings ranked for {what}: its capture failed {run_advice.failed_said(failed)}, so the time at "
        f"stake would come from what is left of it and cannot be trusted; `harness health {ref}` says more, "
        "--ignore-health lists the findings anyway"
    )
    raise typer.Exit(1)


def _show_findings(
    table, what: str, thresholds, reading: Reading, checks, apart: run_advice.Apart, stored: bool = False
) -> None:
    """The findings, largest time at stake first (the evidence as data in csv and json), then what the
    harness's own instruments did and what could not be judged, said once, apart; marked untrusted where
    the capture failed its health checks (and --ignore-health asked for them). `stored`: the findings were
    stored with the run (its export is gone), judged then with the default thresholds."""
    stated = f"thresholds: {thresholds.describe()} (--threshold NAME=VALUE changes them)"
    if stored:
        stated = (
            f"thresholds: {thresholds.describe()} (the defaults, which the stored findings were judged by)"
        )
    failed = run_advice.untrusted_checks(checks)
    if failed:
        warn(f"untrusted: the capture of {what} failed {run_advice.failed_said(failed)}")
    if reading.format is Format.json:
        typer.echo(json.dumps(run_advice.advice_document(table, apart), indent=1))
        return
    if reading.format is Format.csv:
        table = table.assign(**{DATA: [json.dumps(d) for d in table[DATA]]})
    else:
        table = table.drop(columns=[DATA])
    notes = [line for line in (apart.instruments_line, *apart.not_judged) if line]
    if table.empty:
        note(f"no findings in {what}: no rule fired; {stated}")
        for line in notes:
            note(line)
        if reading.format is not Format.table:
            emit(table, reading.format)
        return
    title = f"Findings in {what}, largest time at stake first" + (" (untrusted)" if failed else "")
    emit(table, reading.format, title=title, wide=reading.wide, notes=[*notes, stated])


def _fitted(table, wide: bool):
    """The health table as a terminal shows it, every sentence whole: without the "What to do" column when
    no check has anything to do (an empty column only takes room from the evidence); with what to do
    folded into the evidence where the terminal cannot give both sentences a column of their own."""
    fixes = table["What to do"].astype(str).str.strip()
    if (fixes == "").all():
        return table.drop(columns=["What to do"])
    check = max(len(str(v)) for v in [*table["Check"], "Check"])
    if wide or table_width([check, len("Status"), COMFORTABLE, COMFORTABLE]) <= console_for().width:
        return table
    folded = table["Evidence"].astype(str) + [f". What to do: {f}" if f else "" for f in fixes]
    out = table.drop(columns=["What to do"]).assign(Evidence=folded)
    out = out.rename(columns={"Evidence": "Evidence, what to do"})
    out.attrs.update(
        table.attrs, wrap=["Evidence, what to do"], priority=list(out.columns), deciding=list(out.columns)
    )
    return out


@cli_errors
@one_export
def health_cmd(
    report: ReportArg,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when any check fails (for CI).")] = False,
    details: Annotated[
        bool,
        typer.Option("--details", help="Also print the tables behind the checks (messages, overhead, …)."),
    ] = False,
    reading: Reading = AS_GIVEN,
    db: DbOpt = None,
) -> None:
    """Can this capture be trusted? ok / warn / fail per check, with evidence and what to do.

    Times are seconds from the session's start, where Nsight Systems' timeline puts 0 and `harness timeline
    --start/--end` take them (a PyTorch trace: from its first event)."""

    if not names_a_file(report):
        store = results_db.ResultsStore(db, readonly=True)
        advice = run_advice.run_advice(store, report, cache=not reading.no_cache)
        _say_notes(advice.notes)
        health, title = advice.health, f"Health of run {advice.run_id}"
    else:
        with _open(Path(report), reading) as trace:
            health = run_advice.export_health(trace)
        title = f"Capture health of {Path(report).name}"
    table = health.table()
    if reading.format is Format.table:  # sentences wrapped whole, never cut: no need to repeat them below
        table = _fitted(table, reading.wide)
    if details or reading.format is Format.json:
        emit_many([("health", table), *health.details.items()], reading.format, wide=reading.wide)
    else:
        emit(table, reading.format, title=title, wide=reading.wide)
    if reading.format is Format.table:
        (warn if health.worst != "ok" else note)(health.line())
    if strict and run_advice.failed(health):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("advise", cls=RunRefCommand)(advise_cmd)
    app.command("health", cls=RunRefCommand)(health_cmd)
