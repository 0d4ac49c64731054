"""`harness diff A B` and `harness baseline tag|list`: thin commands over harness.experiments.diff and the
store."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli import export_diff as ed
from harness.cli.common import (
    RUN_REF_HELP,
    DbOpt,
    FormatOpt,
    OptionRefused,
    RunRefCommand,
    WideOpt,
    at_least,
    cli_errors,
    count_option,
    err,
    file_option,
    is_stdout,
    note,
    on_command_line,
    output_folder,
    refuse_inputs,
    refuse_page_on_stdout,
    run_reference,
    run_sides,
    warn,
    wide_where_it_shows,
    writing,
)
from harness.cli.csv_out import write_csv
from harness.cli.reading import NoCacheOpt
from harness.cli.terminal.output import Format, emit, emit_many, markdown_table, to_records, visible
from harness.core.bounds import check_baseline_name
from harness.core.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

    from harness.experiments.diff import DiffResult

from harness.experiments import diff as hd
from harness.store import results as results_db


class DiffFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"
    markdown = "markdown"


SideArg = Annotated[
    str,
    typer.Argument(
        help="A run id (or unique prefix, `latest`, -1, -2, …), baseline:NAME, several runs of one "
        "configuration comma-separated (A1,A2,A3) or the experiment of `run --repeats N` (repeats-…), or an "
        "nsys export / report / Kineto trace path.",
        show_default=False,
        callback=run_sides,
    ),
]


def _tables(result: DiffResult, top: int | None, *, empty: bool = False) -> list[tuple[str, pd.DataFrame]]:
    """The tables to write; `empty` (csv): the verdicts' header too where two runs have no phase in common, so
    that a script reads their columns, not a lone `table` (people read the note saying so)."""
    out = []
    if result.verdicts or (empty and result.verdicts is not None):  # None: two traces
        out.append(
            (
                "Phases: B against A (95% CI of the relative difference of means)",
                hd.verdict_table(result),
            )
        )
    for title, df in result.tables:
        out.append((f"{title} (sorted by |Δ Total Time|)", df.head(top) if top else df))
    return out


def _markdown(result: DiffResult, tables: list[tuple[str, pd.DataFrame]]) -> str:

    parts = [f"**A:** `{visible(result.a.label)}`  \n**B:** `{visible(result.b.label)}`\n"]
    for title, df in tables:
        parts.append(f"### {visible(title)}\n\n{markdown_table(df)}")
    parts += [f"> note: {visible(n)}\n" for n in result.notes]
    return "\n".join(parts)


@cli_errors
@ed.two_export_options()
def diff_cmd(
    ctx: typer.Context,
    a: SideArg,
    b: SideArg,
    gate: Annotated[
        float | None,
        typer.Option(
            "--gate",
            metavar="<pct>",
            callback=at_least("--gate", 0),
            help="Exit 1 when a phase (or the whole step) of two runs regresses by more than PCT %; of two "
            "exports, the iteration time (without iterations: the weaker GPU busy time); exit 1 too when no "
            "verdict can be given (a gate that cannot judge does not pass).",
        ),
    ] = None,
    top: Annotated[
        int | None,
        count_option("--top", 1, "Rows per table (two exports: default as many as fit the terminal)."),
    ] = None,
    fmt: Annotated[
        DiffFormat,
        typer.Option(
            "--format",
            "-f",
            callback=wide_where_it_shows,
            help="table for people; markdown for pull requests; csv or json.",
        ),
    ] = DiffFormat.table,
    no_cache: NoCacheOpt = False,
    html: Annotated[
        Path | None,
        file_option(
            "--html",
            help="Also write a page: bars of the largest changes per table (--top, default 15), the "
            "per-phase verdicts with their CI.",
        ),
    ] = None,
    exports: ed.TwoExports = ed.AS_RECORDED,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            metavar="<dir>",
            help="With --format csv: one CSV file per table in this folder (NN-title.csv) instead of one "
            "tidy CSV on stdout.",
            parser=output_folder("--out"),
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", hidden=True, metavar="<dir>", parser=output_folder("--output"))
    ] = None,  # as timeline's old name
    db: DbOpt = None,
    wide: WideOpt = False,
) -> None:
    """Compare two runs, exports or traces. Two exports or traces: the answer first (GPU time, its split,
    iterations, a verdict, comparability), then kernels, NVTX ranges and CUDA calls, largest change first.
    Two runs: a verdict per phase (regression, improvement, inconclusive) and their exports' tables; one run
    a side is judged against the drift between runs measured for its configuration (`run --repeats N`
    measures it), several a side (A1,A2,A3 B1,B2,B3) by their spread. A program run (`harness profile`) is
    compared as its export is, against another or an export.

    --format csv writes one tidy CSV: a first column `table` names the table each row comes from (the
    union of the tables' columns, empty where a table has no such column); with --out DIR, one CSV per
    table in DIR instead."""
    out = output if output is not None else out
    if out is not None and fmt is not DiffFormat.csv:
        raise UsageError("--out DIR goes with --format csv (one CSV file per table)")
    if out is not None and is_stdout(out):
        out = None  # the tidy CSV on standard output, as without --out
    refuse_page_on_stdout(html)

    stores: list[results_db.ResultsStore] = []

    def store() -> results_db.ResultsStore:
        if not stores:
            stores.append(results_db.ResultsStore(db, readonly=True))
        return stores[0]

    side_a, side_b = hd.resolve(a, store), hd.resolve(b, store)
    hd.check_apart(side_a, side_b)
    ended_so: list[str] = []  # two program runs: how one that did not end ok ended
    if (programs := hd.program_exports(side_a, side_b)) is not None:
        side_a, side_b, ended_so = programs
    _refuse_export_options(ctx, side_a, side_b)
    hd.check_gate(gate, side_a, side_b)
    inputs = [
        *side_a.inputs(),
        *side_b.inputs(),
        *(s.file for s in stores),
    ]
    if html is not None:
        refuse_inputs(html, inputs, "--html")
    if side_a.run is None and side_b.run is None:
        d = ed.compute(side_a, side_b, exports, cache=not no_cache)
        d.notes += [f"{line}: what its export recorded is compared" for line in ended_so]
        for warning in hd.failed_sides(side_a, side_b, cache=not no_cache):
            warn(warning)
        ed.render(d, fmt.value, top, wide, gate, out=out, inputs=inputs)
        if html is not None:
            phase = d.verdict.phase  # the iteration-time (or GPU busy) verdict, as a phase of two runs
            page = hd.DiffResult(side_a, side_b, d.tables, [phase] if phase else None, d.notes)
            _write_page(html, page, top, gate)
        if gate is not None and ended_so:
            err(hd.not_ended_ok(ended_so[0]))
            raise typer.Exit(1)
        if gate is not None:
            ed.apply_gate(d, gate)
        return
    result = hd.diff(side_a, side_b, cache=not no_cache, store=store())
    tables = _tables(result, top, empty=fmt is DiffFormat.csv)
    if fmt is DiffFormat.markdown:
        sys.stdout.write(_markdown(result, tables))
    elif fmt is DiffFormat.json:
        doc = {"a": result.a.label, "b": result.b.label, **{t: to_records(df) for t, df in tables}}
        if gate is not None:  # the gate's outcome in the document, as two exports' json gives it
            refused = hd.gate_refusal(result)
            doc["gate_pct"] = gate
            doc["gate_judged"] = refused is None
            doc["gate_failed"] = refused is not None or bool(hd.gate_failures(result, gate))
        doc["notes"] = result.notes  # what the tables leave out or cannot vouch for, as in the other formats
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif fmt is DiffFormat.csv:
        write_csv(tables, out, result.notes, inputs)
    else:
        note(f"A = {result.a.label}, B = {result.b.label}")
        emit_many(tables, fmt.value, notes=result.notes, wide=wide)
    if html is not None:
        _write_page(html, result, top, gate)
    if gate is not None and (refusal := hd.gate_refusal(result)):
        err(refusal)
        raise typer.Exit(1)
    if gate is not None and result.verdicts is not None:
        failed = hd.gate_failures(result, gate)
        if failed:
            what = ", ".join(f"{v.label} {v.comparison.effect_pct:+.1f}%" for v in failed)
            err(f"gate: regression beyond {gate:g}%: {what}")
            raise typer.Exit(1)
        if blind := hd.gate_blind(result, gate):
            warn(blind)


# the options only two exports or traces take, by parameter: the phases of a run are compared from its steps
EXPORT_ONLY = {
    "iteration_range": "--iteration-range", "iteration": "--iteration", "warmup": "--warmup", "by": "--by",
    "raw_names": "--raw-names",
}  # fmt: skip


def _refuse_export_options(ctx: typer.Context, a: hd.Side, b: hd.Side) -> None:
    """UsageError for a two-export option given where a side is a stored run: it would change nothing."""
    if a.run is None and b.run is None:
        return
    given = [option for name, option in EXPORT_ONLY.items() if on_command_line(ctx, name)]
    if given:
        one = len(given) == 1
        side = "A" if a.run is not None else "B"
        which = (
            "A and B are stored runs, whose phases are compared from their steps"
            if a.run is not None and b.run is not None
            else f"{side} is a stored run, whose phases are compared from its steps"
        )
        raise UsageError(
            f"{', '.join(given)} {'is' if one else 'are'} for two exports or traces; {which}: "
            f"{'it changes' if one else 'they change'} nothing"
        )


def _write_page(out: Path, result: DiffResult, top: int | None, gate: float | None) -> None:

    with writing(out, "--html"):
        page = hd.write_page(out, result, top, gate)
    total = len(page.panels)
    note(f"wrote {page.path} ({len(page.drawn)} of {total} panel{'' if total == 1 else 's'} drawn)")


baseline_app = typer.Typer(
    help="Named runs to diff against: `harness diff baseline:NAME RUN`.", no_args_is_help=True
)


def _baseline_name(name: str) -> str:
    """The callback of `baseline tag NAME`: a name `diff baseline:NAME` can find, checked before the database
    is opened (with none there, an empty name was said as a missing database, exit 1)."""
    try:
        check_baseline_name(name)
    except UsageError as e:
        raise OptionRefused(str(e)) from None
    return name


@baseline_app.command("tag", cls=RunRefCommand)
@cli_errors
def baseline_tag_cmd(
    name: Annotated[
        str,
        typer.Argument(
            help="The baseline's name (re-tagging moves it).", show_default=False, callback=_baseline_name
        ),
    ],
    run: Annotated[
        str,
        typer.Argument(
            help=f"{RUN_REF_HELP[0].upper()}{RUN_REF_HELP[1:]}.", show_default=False, callback=run_reference
        ),
    ],
    db: DbOpt = None,
    format: FormatOpt = Format.table,
) -> None:
    """Name a run as a baseline."""
    import pandas as pd

    # the run is found before the database is opened to write: a --db path that holds no database (a typo)
    # is said, never created empty with its folders
    found = results_db.ResultsStore(db, readonly=True).resolve(run)
    tagged, was = results_db.ResultsStore(db).tag_baseline(name, found)
    if format is Format.table:
        print(f"baseline:{name} = {tagged.id}" + (f" (was {was})" if was else ""))
    else:  # `was`: the run the name was moved from, empty where it is new or set on the same run again
        row = (name, tagged.id, was, tagged.status)
        emit(pd.DataFrame([row], columns=["name", "run_id", "was", "status"]), format)
    if tagged.status != "ok":
        warn(
            f"run {tagged.id} {hd.ended(tagged)}: `harness diff baseline:{name} RUN --gate PCT` refuses to "
            "pass against it"
        )


@baseline_app.command("list")
@cli_errors
def baseline_list_cmd(
    db: DbOpt = None,
    fmt: Annotated[
        DiffFormat,
        typer.Option(
            "--format", "-f", callback=wide_where_it_shows, help="table for people; markdown or csv or json."
        ),
    ] = DiffFormat.table,
    wide: WideOpt = False,
) -> None:
    """The named baselines."""

    store = results_db.ResultsStore(db, readonly=True)
    df = store.baselines()
    for line in df.attrs.get("gone", ()):
        warn(line)
    if df.empty and fmt is DiffFormat.table:  # for people, why it is empty; scripts get the empty table
        if not store.left_out:  # a damaged one left out is said as such
            note("no baselines yet: `harness baseline tag NAME RUN` names a run")
        return
    if fmt is DiffFormat.markdown:
        sys.stdout.write(markdown_table(df))
    else:
        emit(df, fmt.value, title="Baselines", wide=wide)


def register(app: typer.Typer) -> None:
    app.command("diff", cls=RunRefCommand)(diff_cmd)
    app.add_typer(baseline_app, name="baseline")
