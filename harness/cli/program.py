"""`harness profile [OPTIONS] -- CMD ARGS…`: any program under nsys, stored as a run, its tables printed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli.common import DbOpt, FormatOpt, WideOpt, cli_errors, note, say_ending, warn, warn_skipped
from harness.cli.options import NsysArgOpt, NsysPathOpt, ProfileDirOpt
from harness.cli.terminal.output import Format, emit_many
from harness.core.bounds import check_run_name
from harness.core.signals import sigterm_raises
from harness.execution.nsys.launch import check_extra_args

if TYPE_CHECKING:
    import pandas as pd

    from harness.experiments.program import ProgramRun

from harness.cli import render as render_run
from harness.experiments import program as programs
from harness.profilers import nsys as nsys_profiler
from harness.store import results as results_db

TAIL = 8  # lines of a failed program's output (captured together with nsys's) shown after it


@cli_errors
def profile_cmd(
    ctx: typer.Context,
    name: Annotated[
        str | None,
        typer.Option("--name", metavar="<name>", help="The run's model name (default: the program's name)."),
    ] = None,
    nsys_arg: NsysArgOpt = None,
    nsys_path: NsysPathOpt = None,
    profile_dir: ProfileDirOpt = Path("nsys_profiles"),
    db: DbOpt = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """Run CMD ARGS… under nsys with the harness's trace settings, store it as a run and print the
    export's tables. Its NVTX ranges are its phases; the exit code is the program's."""

    check_run_name(name)
    programs.check_program(ctx.args)  # a usage error first, whatever the nsys
    check_extra_args(nsys_arg or [])
    # the program's CUDA is unknown: what this nsys may lose of the driver's, said before it runs; checked
    # before the store, so that a refused nsys creates no database
    checked_nsys = nsys_profiler.cuda_check_for(nsys_path, None)
    store = results_db.ResultsStore(db)  # fail on a bad --db before the program runs
    for line in checked_nsys:
        warn(line)
    with sigterm_raises():
        done = programs.profile_program(
            list(ctx.args),
            store=store,
            name=name,
            nsys_args=list(nsys_arg or []),
            profile_dir=profile_dir,
            nsys_path=nsys_path,
        )
    render(done, format, wide)
    raise typer.Exit(done.exit_code)


def render(p: ProgramRun, fmt: Format, wide: bool) -> None:
    """The summary tables on stdout; the run, its files and anything that went wrong on stderr."""

    prof = p.profile
    files = (("report", prof.rep), ("export", prof.sqlite), ("output", p.log))
    lines = [f"{kind}: {path}" for kind, path in files if path]
    if p.result is not None:
        status, error = p.result.status, p.result.error
        status = error if status == "interrupted" else status + (f" ({error})" if error else "")
        lines.insert(0, f"run {p.run_id} under nsys {p.nsys_version}: {status}")
    if p.advice is not None and fmt is Format.table:  # a capture that failed says so before its numbers
        render_run.say_health(p.advice)
    report = p.report
    advice = render_run.advice_tables(p.advice) if p.advice is not None and fmt is not Format.table else []
    if fmt is not Format.table:  # what the notes below say for people, as data: the run and its files
        advice += _run_tables(p, files)
    if report is not None and (report.tables or fmt is not Format.table):
        emit_many([*report.tables, *advice], fmt, notes=report.notes, skipped=report.skipped, wide=wide)
    elif fmt is not Format.table and advice:  # no export was read: the run and its files all the same
        emit_many(advice, fmt, wide=wide)
    if report is not None and fmt is Format.table:
        warn_skipped(report.skipped)
    if p.advice is not None and fmt is Format.table:
        render_run.say_findings(p.advice, p.run_id)
    for line in lines:
        note(line)
    if p.result is not None and p.result.status == "error" and prof.program_tail.strip():
        tail = prof.program_tail.strip().splitlines()[-TAIL:]
        note("last lines of its output:\n" + "\n".join(tail), lines=True)
    say_ending(p)


def _run_tables(p: ProgramRun, files: tuple[tuple[str, Path | None], ...]) -> list[tuple[str, pd.DataFrame]]:
    """The stored run (its id, status, the program's exit code) and the files kept, as `run --nsys` gives
    them in csv and json; none where nothing was stored."""
    import pandas as pd

    if p.result is None:
        return []
    run = pd.DataFrame(
        [(p.run_id, p.result.status, p.profile.returncode, p.result.error, p.nsys_version)],
        columns=["run", "status", "exit code", "error", "nsys"],
    )
    kept = pd.DataFrame([(kind, str(path)) for kind, path in files if path], columns=["kind", "path"])
    return [("run", run), ("files", kept)]


def register(app: typer.Typer) -> None:
    app.command(
        "profile",
        options_metavar="[OPTIONS] -- CMD ARGS…",
        # every word from CMD on is the program's, `--` or not: its `--name`, `--db`, `-h` are its own
        context_settings={
            "allow_extra_args": True,
            "ignore_unknown_options": True,
            "allow_interspersed_args": False,
        },
    )(profile_cmd)
