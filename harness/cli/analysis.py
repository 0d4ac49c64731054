"""The table commands, one per table of the registry (analysis.tables): each made by `table_command` from
its table's declaration (its own options, as Typer options; then the options every reading command shares,
one `Reading`), parsing its values, asking the front door for the tables (analysis.front.reading) and
rendering them (`render`). A declared option's command-line form (`typer_form`, `spec_group`) is made
here, also for the operator table's --sort and --top on `harness run --profiler torch` (`OperatorView`).
Plus `breakdown` and `cache`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, make_dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from analysis import tables
from analysis.advice.verdict import failed_captures
from analysis.errors import ExportError
from analysis.front.reading import read_tables
from analysis.outputs import utf8_text
from analysis.tables import operators as ops
from analysis.tables import stats_format
from analysis.tables.table import HTA, Option, Table, Tables
from analysis.trace.exports import clear_exports, clear_named, open_source
from analysis.trace.multi import folder_entries
from harness.cli.common import (
    FormatOpt,
    WideOpt,
    at_least,
    cli_errors,
    err,
    given_or_left_out,
    note,
    warn,
    warn_skipped,
)
from harness.cli.option_group import F, option_group
from harness.cli.reading import AS_GIVEN, REPORT_HELP, Reading, ReportArg, reading_options
from harness.cli.terminal.output import Format, emit, emit_many
from harness.core.errors import UsageError
from harness.execution.nsys import export_report, find
from workloads.names import counted

if TYPE_CHECKING:
    import pandas as pd

    from analysis.trace.cache import Cache

from analysis.trace import cache as trace_cache


def read_table(table: Table, report: list[Path], values: dict[str, Any], reading: Reading) -> None:
    """`harness NAME REPORT…` of the table: its options' values through its `prepare` (--stats-format auto:
    the format of the nsys in use; --top: read_tables'), the tables from the front door, rendered."""
    top = values.pop("top", None)
    if len(report) == 1 and report[0].is_file():  # one export is read here: say what is not used
        for flag, given in (("--dask", reading.dask is not None), ("--jobs", reading.jobs is not None)):
            if given:
                note(f"{flag} reads several exports: {report[0].name} is one, read in this process")
    if "stats_format" in values:
        values["stats_format"] = stats_format.chosen(values["stats_format"], find.installed_version)
    result = read_tables(table.name, report, table.prepare(**values), top=top, by_rank=reading.by_rank,
                         jobs=reading.jobs, dask=reading.dask, cache=not reading.no_cache,
                         export=export_report)  # fmt: skip
    render(result, reading)


def table_command(table: Table) -> Callable[..., None]:
    """The command of a declared table: REPORT…, the table's own options, then the shared ones."""
    own = spec_group(f"{table.name.replace('-', '_')}_options", table.options)

    def command(report: list[Path], options: Any, reading: Reading = AS_GIVEN) -> None:
        read_table(table, report, values_of(options), reading)

    command.__annotations__ = {"report": ReportArg, "options": own, "reading": Reading, "return": None}
    return cli_errors(reading_options()(option_group("options", own)(command)))


def epilog(table: Table) -> str:
    """What a table's help ends with: what REPORT may be, and an example."""
    return f"{REPORT_HELP}\n\nExample: {table.example}" if table.example else REPORT_HELP


def register(app: typer.Typer) -> None:
    for table in tables.all():
        app.command(table.name, help=table.help, epilog=epilog(table))(table_command(table))
    app.command("cache")(cache_cmd)
    app.command("breakdown")(breakdown_cmd)


@cli_errors
def cache_cmd(
    clear: Annotated[
        bool, typer.Option("--clear", help="Remove every entry (or, with REPORT, that report's).")
    ] = False,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report",
            help="With --clear: only the entries of this export (of a report: of the export it is read "
            "through, and that export if the cache made it; of a folder or glob pattern: of every export "
            "in it, as the table commands read them).",
            readable=False,
        ),
    ] = None,
    max_size: Annotated[
        str | None,
        typer.Option(
            "--max-size",
            help="Keep the cache under this size (e.g. 5GB): least recently used "
            "entries go first. Saved for later commands; HARNESS_CACHE_LIMIT overrides it.",
        ),
    ] = None,
    format: FormatOpt = Format.table,
    wide: WideOpt = False,
) -> None:
    """The Parquet cache of exports read before: list its entries with their sizes, clear it, limit it."""
    cache = trace_cache.Cache()
    if max_size is not None:
        try:
            limit = trace_cache.parse_size(max_size)
        except ValueError as e:
            raise UsageError(str(e)) from None
        try:
            cache.set_limit(limit)
        except OSError as e:
            why = e.strerror or type(e).__name__
            raise UsageError(
                f"cannot save the cache limit in {cache.root}: {why}; make it a writable folder, or set "
                "HARNESS_CACHE_DIR to one (HARNESS_CACHE_LIMIT sets the limit without saving it)"
            ) from None
        held = [e.size_bytes for e in cache.entries() + cache.exports()] if cache.root.is_dir() else []
        freed = cache.evict()
        note(limit_words(limit, held, freed, emptied=bool(held) and not cache.entries() + cache.exports()))
    if report is not None and not clear:
        raise UsageError("--report goes with --clear: it names the export whose entries are removed")
    if cache.root.exists() and not cache.root.is_dir():  # nothing to list or clear: not an empty cache
        raise UsageError(
            f"the cache {cache.root} is a file, not a folder: set HARNESS_CACHE_DIR to a folder (or unset it)"
        )
    if clear:
        cleared = cache.clear(None) if report is None else clear_named(cache, report)
        if report is None:
            cleared.add(clear_exports())
        removed = counted(cleared.removed, "cache entry", "cache entries")
        note(f"removed {removed} ({cleared.freed:,} bytes) from {cache.root}")
        if report is not None and not cleared.removed and not report.exists():  # a misspelt path, most likely
            warn(f"no file at {report}, and no cache entry of it: check the path")
        for folder in cleared.filled:  # nothing asked for is left: not an error
            warn(
                f"{folder} was being written by another command as it was removed: all it held is gone, and "
                "what that command wrote since is left (run `harness cache --clear` again once it ends)"
            )
        for folder, why in cleared.kept:
            err(f"could not remove {folder}: {why}")
        if cleared.kept:
            raise typer.Exit(1)
        return
    emit(
        cache_table(cache),
        format,
        title=f"trace cache in {cache.root} (limit {cache.limit:,} bytes)",
        wide=wide,
    )


def limit_words(limit: int, held: list[int], freed: int, *, emptied: bool) -> str:
    """What a new limit did, in one line: a limit of 0 keeps nothing from then on, one under every entry
    held (`held`: their sizes) keeps none of them, and an eviction that emptied the cache says so."""
    if limit == 0:
        said = "cache limit set to 0 bytes: nothing read from now on is kept (each command reads its export "
        said += "afresh)"
    elif held and limit < min(held):
        said = f"cache limit set to {limit:,} bytes, under the size of every entry (the smallest "
        said += f"{min(held):,} bytes)"
    else:
        said = f"cache limit set to {limit:,} bytes"
    if freed:
        said += f"; evicted {freed:,} bytes" + (": the cache is empty" if emptied else "")
    return said


def cache_table(cache: Cache) -> pd.DataFrame:
    """The entries and the reports' exports, most recently used first; an entry read of an export named by
    its report."""
    import pandas as pd

    exports = cache.exports()
    report_of = {str((cache.root / e.key).resolve()): e.source for e in exports}
    entries = sorted(cache.entries() + exports, key=lambda e: e.last_used, reverse=True)
    return pd.DataFrame(
        {
            "Source": [  # a name that is not UTF-8 with escapes: no string column takes its surrogates
                utf8_text(f"{report_of[e.source]} (its export)" if e.source in report_of else e.source)
                for e in entries
            ],
            "Format": [e.format for e in entries],
            "Files": [e.files for e in entries],
            "Size (bytes)": [e.size_bytes for e in entries],
            "Last Used": [
                dt.datetime.fromtimestamp(e.last_used).isoformat(timespec="seconds") for e in entries
            ],
            "Source Exists": [e.source_exists for e in entries],
        }
    )


TRACE_SUFFIXES = (".json", ".json.gz")


@cli_errors
@reading_options(omit=("by_rank", "jobs", "dask"))
def breakdown_cmd(
    reports: Annotated[
        list[Path],
        typer.Argument(
            help="Traces, one per rank: Kineto .json(.gz), nsys exports or reports; a folder stands for "
            "the .json(.gz) traces in it.",
            readable=False,
        ),
    ],
    hta: Annotated[bool, typer.Option("--hta", help=HTA.help)] = False,
    all_tables: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Also the per-kernel breakdown, idle-gap statistics, communication/computation overlap "
            "and queue lengths.",
        ),
    ] = False,
    reading: Reading = AS_GIVEN,
) -> None:
    """Where GPU time goes, per rank: idle, compute and non-compute time (HTA's temporal breakdown), time
    per kernel type, and idle time per stream by cause."""
    # imported here: the table commands of this module read a cached export without pandas
    from analysis.hta import breakdown
    from analysis.ranks.capture_ranks import process_ranks
    # pandas: only once a table is asked for

    paths: list[Path] = []
    for path in reports:
        if path.is_dir():
            found = [p for p in folder_entries(path) if p.is_file() and p.name.endswith(TRACE_SUFFIXES)]
            if not found:
                raise ExportError(f"no .json or .json.gz traces in the folder {path}")
            paths += found
        else:
            paths.append(path)
    with contextlib.ExitStack() as stack:  # every trace closed: a private copy goes with its reader
        traces = [
            stack.enter_context(open_source(p, export_report, cache=not reading.no_cache)) for p in paths
        ]
        split: list[str] = []
        if len(traces) == 1:  # one nsys capture of a whole job: each process that launched kernels a rank
            traces, split = process_ranks(traces[0])
        rules = {"hta_rules": hta}
        name = paths[0].name if len(paths) == 1 else f"{len(paths)} traces"
        tables = [
            (
                f"GPU time per rank in {name}: idle, compute, non-compute",
                breakdown.temporal_breakdown(traces, **rules),
            ),
            (
                "GPU time per kernel type (overlaps split out)",
                breakdown.kernel_type_breakdown(traces, **rules),
            ),
        ]
        idle, gaps = (  # one computation of the idle intervals for both tables
            breakdown.idle_tables(traces, **rules)
            if all_tables
            else (breakdown.idle_time_breakdown(traces, **rules), None)
        )
        tables.append(("Idle time per stream, by cause", idle))
        if all_tables:
            tables += [
                (
                    "GPU time per kernel (10 per type, then others)",
                    breakdown.kernel_breakdown(traces, **rules),
                ),
                ("Idle gaps per stream and cause", gaps),
                ("Communication overlapped by computation", breakdown.comm_comp_overlap(traces, **rules)),
            ]
            if all(t.has("runtime") for t in traces):
                tables.append(("Queue length per stream", breakdown.queue_length_summary(traces, **rules)))
        notes = [*split, *dict.fromkeys(n for _, df in tables for n in df.attrs.get("notes", []))]
        if not hta:  # say where the oracle's numbers differ, and why
            notes += breakdown.hta_difference(traces, tables[0][1])
    for warning in failed_captures(paths, cache=not reading.no_cache):
        warn(warning)
    emit_many(tables, reading.format, notes=notes, wide=reading.wide, limit=reading.limit)


# --- a declared option's command-line form -----------------------------------------------------------


def typer_form(option: Option) -> tuple[Any, Any]:
    """The command-line form of a declared option, as a dataclass field of an option group takes it: its
    annotation (`Annotated[type, typer.Option(...)]`; choices as an enum, whose values the command gets)
    and its default."""
    kind: Any = option.kind
    default = option.default
    if option.choices:
        kind = StrEnum(option.name, {c: c for c in option.choices})  # type: ignore[misc]
        default = None if default is None else kind(default)
    check: Callable[[Any], Any] | None = None
    if option.minimum is not None:
        check = at_least(option.flag, option.minimum)
    elif kind is str and default is None:  # `--range ''` was looked for as a name: exit 1, not a usage error
        check = given_or_left_out(option.flag, option.names)
    form = typer.Option(option.flag, help=option.help, metavar=option.metavar, callback=check,
                        show_default=option.show_default)  # fmt: skip
    return Annotated[kind if kind is bool or default is not None else kind | None, form], default


def spec_group(name: str, options: Sequence[Option]) -> type:
    """A frozen dataclass with a field per declared option, each with its command-line form: for
    `option_group`, so that a command made from declarations gets them as its options."""
    made = [(o.name, *_field(o)) for o in options]
    return make_dataclass(name, made, frozen=True)


def _field(option: Option) -> tuple[Any, Any]:
    annotation, default = typer_form(option)
    return annotation, field(default=default)


def values_of(group: Any) -> dict[str, Any]:
    """An option group's values by field name, an enum's as its value."""
    return {f.name: _plain(getattr(group, f.name)) for f in fields(group)}


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, StrEnum) else value


def render(result: Tables, reading: Reading) -> None:
    """One table alone, or a titled list, after a warning for each capture that failed its health checks;
    the tables with no data are named (a warning each reason, in the table format)."""
    tables = result.tables
    how = {"wide": reading.wide, "limit": reading.limit}
    for warning in result.warnings:
        warn(warning)
    if len(tables) == 1 and not result.titled:
        emit(tables[0][1], reading.format, title=tables[0][0], notes=result.notes, **how)  # type: ignore[arg-type]
        return
    emit_many(tables, reading.format, notes=result.notes, skipped=result.skipped, **how)  # type: ignore[arg-type]
    if reading.format is Format.table:
        warn_skipped(result.skipped)


# --- the operator table's order and length on `harness run --profiler torch` ------------------------------
# the --sort and --top that `harness operators` declares (analysis.tables.operators), the same options

SortOpt, _ = typer_form(ops.SORT_OPTION)
TopOpt, _ = typer_form(ops.TOP_OPTION)


@dataclass(frozen=True)
class OperatorView:
    """The order of an operator table and how many rows it keeps (None: every row for `harness operators`;
    `run --profiler torch` keeps its top 15)."""

    sort: SortOpt = ops.SORT_OPTION.default
    top: TopOpt = ops.TOP_OPTION.default


AS_TORCH_SORTS = OperatorView()


def operator_options() -> Callable[[F], F]:
    """--sort and --top on a command, in place of its parameter `view: OperatorView`."""
    return option_group("view", OperatorView)


def check_sort(sort: str) -> str:
    """The column --sort names, among every column an operator table can have (a UsageError-like
    AnalysisError names the choices): checked before a run, not after it."""
    return ops.sort_column(sort, [ops.NAME, ops.SHAPES, *ops.CPU_COLUMNS, *ops.CUDA_COLUMNS, ops.CALLS])
